/* Model and cluster presets of `trident plan`. Every cluster figure is the
 * vendor's data-sheet value, cited beside it; the one figure no data sheet
 * gives (the achievable GEMM fraction of peak) is cited from its measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trident/planner.h"

static const td_plan_model models[] = {
    /* GPT-2 (Radford et al. 2019, table 2; "350m" is the 24-layer 1024-wide
     * model, "1.5b" the 48-layer one), vocabulary 50257, context 1024 */
    {"gpt2-124m", 12, 12, 768, 50257, 1024},
    {"gpt2-350m", 24, 16, 1024, 50257, 1024},
    {"gpt2-1.5b", 48, 25, 1600, 50257, 1024},
    /* GPT-3 175B (Brown et al. 2020, table 2.1), GPT-2's vocabulary */
    {"gpt3-175b", 96, 96, 12288, 50257, 2048},
    /* Megatron-LM (Narayanan et al. 2021) table 1: vocabulary 51200, sequence 2048 */
    {"megatron-1.7b", 24, 24, 2304, 51200, 2048},
    {"megatron-3.6b", 30, 32, 3072, 51200, 2048},
    {"megatron-7.5b", 36, 32, 4096, 51200, 2048},
    {"megatron-18b", 40, 48, 6144, 51200, 2048},
    {"megatron-39b", 48, 64, 8192, 51200, 2048},
    {"megatron-76b", 60, 80, 10240, 51200, 2048},
    {"megatron-145b", 80, 96, 12288, 51200, 2048},
    {"megatron-310b", 96, 128, 16384, 51200, 2048},
    {"megatron-530b", 105, 128, 20480, 51200, 2048},
    {"megatron-1t", 128, 160, 25600, 51200, 2048},
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

int td_plan_model_preset(const char *name, td_plan_model *m) {
    for (int i = 0; i < N_MODELS; i++)
        if (strcmp(models[i].name, name) == 0) {
            *m = models[i];
            return 0;
        }
    return -1;
}

const char *td_plan_model_presets(void) {
    return "gpt2-124m, gpt2-350m, gpt2-1.5b, gpt3-175b, megatron-1.7b, megatron-3.6b, megatron-7.5b, "
           "megatron-18b, megatron-39b, megatron-76b, megatron-145b, megatron-310b, megatron-530b, megatron-1t";
}

/* Devices.
 * A100 SXM4 80GB, NVIDIA A100 Tensor Core GPU data sheet (2021): BF16/FP16
 *   tensor core 312 TFLOPS dense (624 with sparsity), 80 GB HBM2e at
 *   2,039 GB/s, NVLink 600 GB/s (bidirectional: 300 GB/s per direction).
 * H100 SXM5 80GB, NVIDIA H100 Tensor Core GPU data sheet: BF16 tensor core
 *   1,979 TFLOPS with sparsity (989.4 dense), 80 GB HBM3 at 3.35 TB/s,
 *   NVLink 900 GB/s (450 GB/s per direction).
 * Achievable fraction of peak for large GEMMs: the best bf16 matmul over a
 *   sweep of shapes, S. Bekman, "Machine Learning Engineering", chapter
 *   compute/accelerator, "Maximum Achievable Matmul FLOPS comparison table"
 *   (mamf-finder.py): A100 SXM 267.9 of 312 TFLOPS (85.9%), H100 SXM 792.1
 *   of 989 (80.1%), CUDA 12.1.
 * Networks: one InfiniBand port per GPU (DGX A100 and DGX H100 system data
 *   sheets: 8 single-port compute adapters per 8-GPU node), per direction
 *   EDR 100 Gb/s = 12.5 GB/s, HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s
 *   (InfiniBand Trade Association roadmap; Mellanox ConnectX-5/6/7 data
 *   sheets).
 * What software achieves of those peaks (measurements, not data sheets):
 * - memory: a streaming read on an A100-SXM4-80GB reaches 1.80 of its
 *   2.04 TB/s, 88% (Nsight Compute agrees; NVIDIA developer forums, "Trouble
 *   to reach peak bandwidth of A100", which also cites a GTC talk's best
 *   kernel at about 90%). The elementwise, softmax and dropout kernels are
 *   charged at 88% of the data sheet. H100: no measurement here; the same
 *   fraction is assumed.
 * - attention's batched GEMMs (one per head, inner size h/a = 64-160):
 *   torch.bmm fp16 of shape 512 x 1024 x 1024 x 128 runs at 132.4 TFLOP/s
 *   on an A100 (CUDA 11.7; pytorch/pytorch issue 83272), 42% of peak: each
 *   element of the s x s scores costs 2 h/a FLOPs per 2 bytes written or
 *   read, below the A100's 153 FLOP/byte ridge. H100: the same fraction of
 *   peak is assumed.
 * - NCCL all-reduce bus bandwidth on 8 A100-SXM4-80GB over NVLink/NVSwitch:
 *   about 200 GB/s of the 300 (nccl-tests issues 149 and 178: ~200 and
 *   208 GB/s), 2/3; between nodes over HDR, 96 GB/s of a node's 100 GB/s
 *   of ports at the largest message (nccl-tests issue 119: 3 nodes of 8
 *   A100 with 4 HDR ports each), 96%. Both fractions are applied to every
 *   preset's links.
 * Latencies are no data-sheet figure: a ring step costs the collective
 *   library's per-step software latency more than the wire's (ConnectX-6:
 *   under 600 ns); 2 us inside a node and 5 us between nodes are
 *   order-of-magnitude values, and change the large messages planned here
 *   by well under 1%. */
typedef struct {
    const char *name;
    double mem_gb, tflops, eff, hbm_gbs, nvlink_gbs, ib_gbs;
} cluster_row;

#define HBM_ACHIEVED (1.80 / 2.04)
#define BMM_FRACTION (132.4 / 312)
#define NVLINK_ACHIEVED (200.0 / 300)
#define IB_ACHIEVED (96.0 / 100)

static const cluster_row clusters[] = {
    {"a100-edr", 80, 312, 267.9 / 312, 2039, 300, 12.5},
    {"a100-hdr", 80, 312, 267.9 / 312, 2039, 300, 25},
    {"a100-ndr", 80, 312, 267.9 / 312, 2039, 300, 50},
    {"h100-ndr", 80, 989.4, 792.1 / 989, 3350, 450, 50},
};
#define N_CLUSTERS ((int)(sizeof clusters / sizeof clusters[0]))

const char *td_plan_cluster_presets(void) { return "a100-edr, a100-hdr, a100-ndr, h100-ndr, local"; }

/* Where `trident plan --calibrate` is to save this machine's profile. */
static void profile_path(char *buf, size_t n) {
    const char *env = getenv("TRIDENT_PROFILE");
    snprintf(buf, n, "%s", env && *env ? env : "trident-profile.json");
}

int td_plan_cluster_preset(const char *name, td_plan_cluster *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (strcmp(name, "local") == 0) {
        char path[512];
        struct stat st;
        profile_path(path, sizeof path);
        if (stat(path, &st) != 0)
            snprintf(err, errlen,
                     "--cluster local: no calibration profile at %s (set TRIDENT_PROFILE to another); "
                     "run `trident plan --calibrate` on this machine first",
                     path);
        else
            snprintf(err, errlen,
                     "--cluster local: this build cannot read the calibration profile %s yet; "
                     "give the machine with --device-mem --device-tflops --intra-bw --inter-bw",
                     path);
        return -1;
    }
    for (int i = 0; i < N_CLUSTERS; i++) {
        const cluster_row *r = &clusters[i];
        if (strcmp(r->name, name) != 0) continue;
        snprintf(c->name, sizeof c->name, "%s", r->name);
        c->gpus_per_node = 8;
        c->mem_bytes = r->mem_gb * 1e9;
        c->peak_flops = r->tflops * 1e12;
        c->gemm_eff = r->eff;
        c->bmm_flops = r->tflops * 1e12 * BMM_FRACTION;
        c->hbm_bw = r->hbm_gbs * 1e9 * HBM_ACHIEVED;
        c->intra_bw = r->nvlink_gbs * 1e9 * NVLINK_ACHIEVED;
        c->inter_bw = r->ib_gbs * 1e9 * IB_ACHIEVED;
        c->intra_lat = 2e-6;
        c->inter_lat = 5e-6;
        return 0;
    }
    snprintf(err, errlen, "--cluster '%s' is not a preset; use %s", name, td_plan_cluster_presets());
    return -1;
}
