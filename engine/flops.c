// flops.c — model FLOPs of one training step (SPEC §8: model TFLOP/s and MFU).
//
// Convention (the usual "model FLOPs" of MFU, as in the PaLM / nanoGPT accounting):
//   * Only matrix products are counted: every matrix product of the forward, one
//     multiply-add = 2 FLOPs. Element-wise work (norms, activations, gates, softmax, CE, the
//     residual and ybar updates, the MemRead gate's dot product, the KDA decay) and gathers
//     (Emb, Engram rows) count 0.
//   * One training step = forward + backward = 3 x the forward's FLOPs (the backward of a
//     product costs two products of the same size: d-input and d-weight). The optimizer and
//     the retraction are not counted.
//   * Nothing is counted twice for recomputation, and the count is what the model computes,
//     not what a particular kernel does (the chunked KDA does extra intra-chunk work; it still
//     counts as the recurrence below).
// Per token, per iteration of the block (N = B*T tokens, dh = d/H, D = dh):
//   controller W_c                      3 d
//   router W_r           (moe on)       E d
//   KDA                  (kda on)       q, k, v, o: 4 d^2; W_b: H d;
//                                       W_f1/W_f2 and W_g1/W_g2 (low rank d <-> dh): 4 d dh;
//                                       core: 3 D x D mat-vecs per head (S^T k, the rank-1
//                                       write k (v - S^T k)^T, S^T q) = 3 H D^2 = 3 d dh
//   MoE experts          (moe on)       k assignments x (d->r, r->f, f->r, r->d) = k 2 r (d + f)
//   OutProj_i                           d^2
//   Head (scored iterations only: all L under loss=rec, the last under loss=final)   256 d
// Once per forward, per token:
//   Engram key and val   (engram on)    2 (O De) d
// The multiply-adds above, x 2 (FLOPs) x 3 (forward + backward) x N.
// An arm that is off (arms != NULL and arms->on[arm] == 0) removes its terms; arms == NULL
// means every arm on. The rezero, retract and aux arms do not change the count.
#include "model.h"

double model_flops_per_step(const Config *c, int B, int T, const Arms *arms) {
    int kda = !arms || arms->on[ARM_KDA];
    int engram = !arms || arms->on[ARM_ENGRAM];
    int moe = !arms || arms->on[ARM_MOE];
    double d = c->d, H = c->H, dh = d / c->H, E = c->E, k = c->k, r = c->r, f = c->f;
    double L = c->L, O = c->n_orders, De = c->engram_dim;

    double per_iter = 3 * d + d * d;                       // controller, OutProj
    if (kda) per_iter += 4 * d * d + H * d + 4 * d * dh + 3 * H * dh * dh;
    if (moe) per_iter += E * d + k * 2 * r * (d + f);
    double scored = c->loss_final ? 1 : L;
    double macs = L * per_iter + scored * 256 * d;         // per token
    if (engram) macs += 2 * O * De * d;
    return 6.0 * macs * (double)B * (double)T;
}
