// model.h — the dormouse model (SPEC §1–§3): the named parameter table over one contiguous
// buffer, the activation arena, and the forward/backward orchestration of the looped block.
#pragma once
#include <stdint.h>
#include "../kernels/backend.h"
#include "arms.h"
#include "config.h"
#include "err.h"

// Optimizer groups (SPEC §4). Under opt=adamw everything but TABLE is AdamW.
typedef enum { GROUP_MUON, GROUP_ADAMW, GROUP_ADAMW_1D, GROUP_TABLE } OptGroup;

typedef struct {
    char name[32];
    int ndim;
    int shape[4];
    size_t offset, numel;      // in reals, into the parameter buffer
    OptGroup group;
    int n_mats, rows, cols;    // 2-D matrices it holds: n_mats of [rows, cols] (Muon, retraction)
    int orthonormal;           // TSCT U or V factor: retracted after each step
} ParamTensor;

// Indices of the named tensors. The parameter buffer holds them in build_table's order
// (engine/model.c: the fused projection's weights first, consecutive), not in this one: Model.order
// lists them by offset.
enum {
    P_EMB, P_ITER_EMB, P_BLK_NORM,
    P_CTRL_W, P_CTRL_B, P_ROUTER,
    P_WQ, P_WK, P_WV, P_WB, P_WF1, P_WF2, P_A, P_DT_BIAS, P_W_ON, P_WG1, P_WG2, P_BG, P_WO,
    P_MK, P_MV, P_MEM_GN, P_MEM_GK,
    P_U1, P_S1, P_V1, P_U2, P_S2, P_V2,
    P_ALPHA, P_OUTPROJ, P_OUT_NORM, P_HEAD,
    P_TABLES,
    P_COUNT
};

// The projections of n that share one gemm: their weights are consecutive rows of the
// parameter buffer starting at kda.wq (the table is built in this order), so together they are
// one [P, d] matrix. Column offsets into IterActs.proj (and rows of that matrix):
typedef struct { int q, k, v, b, f1, g1, c, z, P; } ProjLayout;
static inline ProjLayout proj_layout(const Config *c) {
    int d = c->d, H = c->H, dh = c->d / c->H;
    ProjLayout l;
    l.q = 0; l.k = d; l.v = 2 * d; l.b = 3 * d; l.f1 = l.b + H; l.g1 = l.f1 + dh;
    l.c = l.g1 + dh; l.z = l.c + 3; l.P = l.z + c->E;
    return l;
}

// Activations of one iteration of the block, [N = B*T] rows. Shapes beside each.
typedef struct {
    real *u;          // [N, d] h_{i-1} + IterEmb[i]
    real *n, *n_rstd; // [N, d], [N]
    real *proj;       // [N, P] every projection of n in one gemm (see ProjLayout): q, k, v before
                      // silu, beta and ctrl before the sigmoid (ctrl without its bias), zf1, gt1, z
    real *ctrl;       // [N, 3] gates (w_attn, w_mem, w_ffn)
    real *z;          // [N, E] router logits
    // KDA arm
    real *sq, *sk, *sv;     // [N, d] sigmoid of the q, k, v projections (silu(x) = x sigmoid(x))
    real *q, *k, *v;        // [N, d] l2norm(silu(q proj))*dh^-1/2, l2norm(silu(k proj)), silu(v proj)  ([N, H, dh])
    real *q_rn, *k_rn;      // [N, H] reciprocal norms
    real *beta;             // [N, H]
    real *zf2;              // [N, d] the low-rank decay path (zf1 lives in proj)
    real *gs;               // [N, d] sigmoid(exp(A_h) (z + dt_bias))
    real *g;                // [N, d] log decay = g_min * gs
    real *o;                // [N, d] KDA core output
    real *on, *on_rstd;     // [N, d], [N, H] head RMSNorm * w_on
    real *gt;               // [N, d] output gate (gt1 lives in proj)
    real *og;               // [N, d] on * gt
    real *a;                // [N, d] arm output W_o og
    real *kda_ws;           // backend KDA workspace
    // memory arm
    real *nn, *nn_rstd;     // [N, d], [N] RMSNorm(n) with gain mem_gn
    real *mgate;            // [N] sigmoid(nn . kn / sqrt d)
    real *e;                // [N, d] mgate * val
    // expert arm
    real *gout;             // [N, d]
    real *moe_ws;
    // residual and readout
    real *body;             // [N, d]
    real *h;                // [N, d] h_i
    real *y, *ybar;         // [N, d] OutProj_i(h_i), mean(y_1..y_i)
    real *yn, *yn_rstd;     // [N, d], [N] RMSNorm_out(ybar)
    real *probs;            // [N, 256] softmax of logits_i (logits are not kept)
    real *losses;           // [N] per-token CE of logits_i
} IterActs;

// Every array below (and in IterActs) is backend memory (device memory under CUDA), carved from
// one backend allocation `buf`; only `it`, the per-iteration pointer sets, is host memory. The
// engine touches the arrays only through the backend table (ops, or download into host scratch).
typedef struct {
    int B, T;
    int *x, *tgt;           // [N], [N] token ids (uploaded by model_forward)
    const int *host_x;      // [N] the same ids in host memory (engram_ram hashes them on the host)
    int32_t *rows;          // [O, N]
    double *loss_sum;       // [L] per-depth CE sums of the last forward (sum_forward)
    real *h0;               // [N, d]
    real *m;                // [N, O*De] retrieved memory
    real *key, *val;        // [N, d]
    real *kn, *kn_rstd;     // [N, d], [N]
    real *logits;           // [N, 256] scratch
    IterActs *it;           // [L]
    // gradient scratch (one iteration at a time)
    real *dh, *dh_prev, *dn, *dbody, *dtmp, *dtmp2, *dybar, *dlogits;  // [N, d] (dlogits [N,256])
    real *dq, *dk, *dv, *dbeta, *dg, *do_, *dog, *dgt, *dzf1, *dzf2, *dgt1; // [N, d]-ish
    real *dkey, *dval, *dkn, *dm; // [N, d] x3, [N, O*De]
    real *dz, *dctrl;       // [N, E], [N, 3]
    real *dproj;            // [N, P] gradient of IterActs.proj
    real *buf;              // the arena
    size_t nbuf;
} Acts;

typedef struct {
    Config cfg;
    const Backend *be;
    ParamTensor t[P_COUNT];
    int order[P_COUNT];     // tensor indices in layout order (rising offsets): build_table's
    int n_order;
    size_t n_params;        // reals in the (logical) parameter buffer: layout, checkpoints
    size_t n_dev;           // of which the first n_dev are backend memory (n_params unless engram_ram)
    real *params, *grads;   // [n_dev] each, backend memory
    // engram_ram = on (SPEC §3 "Host-RAM tables"): the tables, the layout's last tensor
    // [n_dev, n_params), live in host memory with their gradient. Each forward hashes and gathers
    // the batch's rows on the host and uploads them (acts.m); backward downloads dm and scatters
    // it into tab_grad on the host; the optimizer updates the touched rows there (optim.c).
    real *tab, *tab_grad;   // host [O, R, De] each, NULL when engram_ram is off
    real *stage_m;          // host (pinned on CUDA) [N, O*De]: gathered rows, then dm
    int32_t *host_rows;     // host [O, N] the rows the last forward read (engram_ram)
    int32_t *dirty_rows;    // host [O, dirty_n] the rows of tab_grad the last backward wrote
    int dirty_n;
    int stage_n;            // tokens stage_m / host_rows / dirty_rows hold
    Arms arms;
    Acts acts;
    int acts_B, acts_T, acts_chunk;  // the activations' shape; acts_chunk: the kda_chunk the KDA workspace was sized for
    // results of the last forward
    double last_loss;       // mean CE (nats) over the scored iterations
    double last_aux;        // mean aux over iterations (unweighted)
    int last_depth;         // iterations run
    unsigned char last_on[ARM_COUNT];  // the arm switches it ran with (probes name only what ran)
    double depth_loss[64];  // mean CE of logits_i, i = 1..last_depth (when computed)
    int *expert_load;       // [L, E] tokens per expert in the last forward (host mirror: model_read_moe)
    // What moe_forward writes per iteration, on the backend (one allocation, aux first): the
    // forward never waits for them; model_read_moe downloads them, a captured step reads them there
    real *moe_aux;          // [L] aux loss of iteration i (backend memory)
    int *moe_load;          // [L, E] routed assignments per iteration and expert (backend memory)
    // The parity reference only (engine/parity.c): when set, iteration i's MoE follows the
    // routing route_force + i*N*k (host [L, N, k], another backend's choice) through
    // be->moe_forward_routed, and route_diff counts where its own top-k would differ. NULL always
    // in training.
    const int *route_force;
    MoERouteDiff route_diff;
} Model;

// Build the tensor table for cfg, allocate, and initialise per SPEC §4 "Defaults".
int model_create(Model *m, const Config *cfg, const Backend *be, uint64_t seed, dm_err *err);
// Only the tensor table of cfg (names, shapes, offsets, n_params) in m: no memory, nothing to
// free. What a checkpoint is checked against before a model of its config is built.
void model_layout(Model *m, const Config *cfg);
// The same tensors and buffers with every parameter 0 (no initialisation: the caller puts
// weights in with model_params_put; parity checks copy a model this way).
int model_create_blank(Model *m, const Config *cfg, const Backend *be, dm_err *err);
void model_free(Model *m);
// The backend's index limits (kernels/backend.h, shape_check) for a model of cfg at B x T: 0, or 1
// with the one-line reason (which limit, what to lower). Asked before anything is allocated for
// them: building a model (engine_build), batch changed on a live one (engine_set_many; seq is an
// architecture key),
// the activations (model_reserve_try), :check parity's two models (engine_check_parity). NULL be,
// or a backend without limits (CPU): 0.
int model_shape_check(const Backend *be, const Config *cfg, int64_t B, int64_t T, dm_err *err);
// Ensure the activation arena fits B x T.
void model_reserve(Model *m, int B, int T);
// The same, with an error instead of an exit when the memory is not there (the commands' path:
// a batch too large for the machine is a one-line error, the model and optimizer stay intact).
int model_reserve_try(Model *m, int B, int T, dm_err *err);

// Forward over x [B, T] with targets tgt [B, T] (may be NULL: no loss). Runs `depth`
// iterations (<= L). mode: FWD_TRAIN scores per cfg.loss; FWD_ALL_DEPTHS scores every depth
// into depth_loss (for :eval-depths); FWD_LAST scores only logits_depth.
typedef enum { FWD_TRAIN, FWD_ALL_DEPTHS, FWD_LAST } FwdMode;
double model_forward(Model *m, const int *x, const int *tgt, int B, int T, int depth, FwdMode mode);
// The MoE's per-iteration aux values and routed counts of the last forward (m->moe_aux,
// m->moe_load) into the host mirrors last_aux (their mean over depth) and expert_load (zeros
// when the moe arm is off): one download. model_forward calls it; a step that only enqueued its
// forward calls it when it reports.
void model_read_moe(Model *m);
// The training step's forward (engine/step.c): the token ids and targets are already in
// m->acts.x / m->acts.tgt (uploaded asynchronously by the step), every op is enqueued and
// nothing is read back — the per-depth CE sums stay in m->acts.loss_sum (m->last_loss is NAN;
// m->depth_loss[i] is 0 where depth i is scored, NAN where not).
void model_forward_enqueue(Model *m, int B, int T, int depth, FwdMode mode);
// Backward of the last FWD_TRAIN forward into m->grads (zeroed first). The loss is
// CE (+ moe_aux * aux when the aux arm is on).
void model_backward(Model *m);
// The training objective of the last forward: CE + moe_aux * aux (what backward differentiates).
double model_objective(const Model *m);

// Retract every orthonormal factor (U, V); returns the largest per-entry orthogonality error
// after retraction.
double model_retract(Model *m);
// The largest per-entry orthogonality error of the orthonormal factors as they are; -1 when the
// device cannot hold the measurement's workspace
double model_orth_error(const Model *m);
// The arm a parameter tensor belongs to (ARM_KDA, ARM_ENGRAM, ARM_MOE, ARM_REZERO), or -1 for
// the shared ones (embedding, norms, controller, readout, head). The optimizer leaves a tensor
// alone while its arm is off: momentum, weight decay and retraction would otherwise keep moving
// weights the model is not using, and `:arm X on` would bring back a different arm.
int param_arm(int i);

// The logical parameter buffer [n_params] to / from host memory: the backend part and, under
// engram_ram, the host tables. Every whole-model copy (checkpoints, snapshots, device moves,
// determinism and parity checks) goes through these, so the placement never shows in a file.
void model_params_get(const Model *m, real *dst);
void model_params_put(Model *m, const real *src);
void model_grads_get(const Model *m, real *dst);
// engram_ram: the host staging for a batch of N tokens (grown on demand); 1 when it cannot be had
int model_ram_reserve(Model *m, int N);

// Counts: compute parameters and memory-table rows (reals).
void model_param_counts(const Model *m, size_t *compute, size_t *table);
int model_find_param(const Model *m, const char *name);

// Model FLOPs of one training step (forward + backward) for a config at B x T, with the arms
// on as in `arms` (NULL = all on).
double model_flops_per_step(const Config *c, int B, int T, const Arms *arms);
