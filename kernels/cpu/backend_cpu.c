// backend_cpu.c — the CPU implementation of the backend table (kernels/backend.h).
#include <stdlib.h>
#include <string.h>
#include "../backend.h"
#include "fused.h"
#include "kda.h"
#include "moe.h"
#include "ops.h"
#include "optim_ops.h"
#include "retract.h"
#include "blas.h"

static void *cpu_alloc(size_t bytes) {
    void *p = calloc(bytes ? bytes : 1, 1);
    return p;
}
static void cpu_free(void *p) { free(p); }
static void cpu_zero(void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_gemm(int tA, int tB, int M, int N, int K, real alpha, const real *A, int lda,
                     const real *B, int ldb, real beta, real *C, int ldc) {
    gemm_rm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static const Backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc, .free = cpu_free, .zero = cpu_zero, .upload = cpu_copy, .download = cpu_copy,
    .matmul_forward = matmul_forward, .matmul_backward = matmul_backward, .gemm = cpu_gemm,
    .rmsnorm_forward = rmsnorm_forward, .rmsnorm_backward = rmsnorm_backward,
    .l2norm_forward = l2norm_forward, .l2norm_backward = l2norm_backward,
    .silu_forward = silu_forward, .silu_backward = silu_backward,
    .sigmoid_forward = sigmoid_forward, .sigmoid_backward = sigmoid_backward,
    .embedding_forward = embedding_forward, .embedding_backward = embedding_backward,
    .softmax_ce_forward = softmax_ce_forward, .softmax_ce_backward = softmax_ce_backward,
    .engram_rows = engram_rows, .engram_gather = engram_gather, .engram_scatter = engram_scatter,
    .kda_ws_size = kda_chunk_ws_size, .kda_forward = kda_chunk_forward, .kda_backward = kda_chunk_backward,
    .kda_step = kda_step,
    .moe_ws_size = moe_ws_size, .moe_forward = moe_forward, .moe_backward = moe_backward,
    // fused element-wise ops of the looped block (fused.c)
    .add_row_forward = add_row_forward, .silu_rows_forward = silu_rows_forward,
    .sigmoid_split_forward = sigmoid_split_forward, .decay_gate_forward = decay_gate_forward,
    .gate_mul_forward = gate_mul_forward, .mem_gate_forward = mem_gate_forward, .mix_forward = mix_forward,
    .running_mean_forward = running_mean_forward, .sum_forward = sum_forward,
    .ce_logits_backward = ce_logits_backward, .running_mean_backward = running_mean_backward,
    .rezero_backward = rezero_backward, .mix_arm_backward = mix_arm_backward,
    .gate_mul_backward = gate_mul_backward, .decay_gate_backward = decay_gate_backward,
    .sigmoid_rows_backward = sigmoid_rows_backward, .silu_rows_backward = silu_rows_backward,
    .l2norm_silu_backward = l2norm_silu_backward, .mem_gate_backward = mem_gate_backward,
    .bias_backward = bias_backward, .copy_rows = copy_rows, .add_inplace = add_inplace,
    .retract_scratch_size = retract_scratch_size, .retract = retract, .orth_error = orth_error,
    // optimizer ops (optim_ops.c)
    .opt_sumsq = opt_sumsq, .opt_decide = opt_decide, .opt_clip = opt_clip, .opt_adamw = opt_adamw,
    .opt_adam_rows_ws_size = opt_adam_rows_ws_size, .opt_adam_rows = opt_adam_rows,
    .opt_muon_scratch_size = opt_muon_scratch_size, .opt_muon = opt_muon,
    .opt_retract_scratch_size = opt_retract_scratch_size, .opt_retract = opt_retract,
};

const Backend *backend_cpu(void) { return &cpu_backend; }
