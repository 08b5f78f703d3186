"""What makes glove.c's record loop run on a GPU: one CUDA kernel, explained once.

``per_record.sgd_records`` is the lesson: record by record, AdaGrad, lock-free
threads. On a CPU numba compiles it for a few threads (``compiled``). A GPU
runs tens of thousands of threads, and the same loop maps onto it as
Hogwild at a larger scale; ``train_records`` takes this path for a model whose
tables are on a GPU. The kernel below is that loop in CUDA C, with three
mechanisms beneath it:

1. **A warp per record.** The 32 threads of a warp (the GPU's unit of
   execution) share one record: lane l handles components l, l + 32, l + 64...
   of the two rows, so their reads of a row are consecutive in memory
   (coalesced). The dot product's 32 partial sums are added with warp
   shuffles (``__shfl_xor_sync``, registers to registers, no memory); lane 0's
   diff is handed to every lane, so all 32 agree on it bit for bit. A lane
   reads and writes only its own components, so no lane waits for another.
2. **Every warp a Hogwild worker.** The grid's warps take records
   k = warp, warp + warps, ... and update the tables with no locks, as glove.c's
   threads do; two warps may update one word's row at once and lose a step.
   One warp alone (``warps=1``) takes the records in order, as the loop does:
   the tests compare it with ``sgd_records`` (equal up to the order of the dot
   product's additions and the GPU's ``log`` and ``pow``).
3. **Step 3's check in one vote.** glove.c moves a vector only when the sum of
   its steps is a number; each lane checks its own part and ``__all_sync``
   takes the vote. Every step is at most eta * clip / sqrt(G) with G >= 1, so a
   sum of them cannot overflow: the vote is glove.c's check.

Each warp adds its cost and skipped records in an array of its own, summed on
the device after the kernel: no atomics, and one number read back per epoch.
The records travel to the GPU once, as glove.c's 16-byte ``RECORD`` bytes
(a struct of the same layout in the kernel), after their ids are checked on
the host. CUDA compiles the kernel at its first use (cupy's ``RawKernel``
keeps the result on disk).

Cost per epoch: O(nnz d) arithmetic and 4 row reads and writes per record,
as on the CPU, spread over the warps (``default_warps`` says how many).
Float64, as the CPU loop: the numbers are the CPU's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

KERNEL = r"""
struct Record { int word1; int word2; double val; };   // glove.c's CREC: ids from 1

extern "C" __global__ void glove_records(
        double* word, double* context, double* word_gradsq, double* context_gradsq,
        const Record* records, long long n, int dim, double eta, double x_max,
        double alpha, double clip, double* warp_cost, long long* warp_skipped) {
    const unsigned all = 0xffffffffu;
    int lane = threadIdx.x % 32;
    long long warp = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / 32;
    long long warps = gridDim.x * (long long)blockDim.x / 32;
    double cost = 0.0;
    long long skipped = 0;
    for (long long k = warp; k < n; k += warps) {
        Record r = records[k];
        double* w = word + (long long)(r.word1 - 1) * (dim + 1);
        double* c = context + (long long)(r.word2 - 1) * (dim + 1);
        double* wg = word_gradsq + (long long)(r.word1 - 1) * (dim + 1);
        double* cg = context_gradsq + (long long)(r.word2 - 1) * (dim + 1);
        // 1. the residual: each lane's part of the dot product, added across the warp
        double part = 0.0;
        for (int b = lane; b < dim; b += 32) part += w[b] * c[b];
        for (int offset = 16; offset > 0; offset /= 2) part += __shfl_xor_sync(all, part, offset);
        double diff = __shfl_sync(all, part + w[dim] + c[dim] - log(r.val), 0);  // lane 0's
        double fdiff = r.val > x_max ? diff : pow(r.val / x_max, alpha) * diff;
        if (!isfinite(diff) || !isfinite(fdiff)) { skipped += lane == 0; continue; }
        if (lane == 0) cost += 0.5 * fdiff * diff;                                // 2.
        // 3. the vectors: each lane's steps from the values before this record
        double steps_w[32], steps_c[32];  // dim <= 32 * 32 (checked on the host)
        double total = 0.0;
        for (int b = lane, s = 0; b < dim; b += 32, s++) {
            double gw = eta * fmin(fmax(fdiff * c[b], -clip), clip);
            double gc = eta * fmin(fmax(fdiff * w[b], -clip), clip);
            steps_w[s] = gw / sqrt(wg[b]);  wg[b] += gw * gw;
            steps_c[s] = gc / sqrt(cg[b]);  cg[b] += gc * gc;
            total += steps_w[s] + steps_c[s];
        }
        if (__all_sync(all, isfinite(total))) {
            for (int b = lane, s = 0; b < dim; b += 32, s++) {
                w[b] -= steps_w[s];
                c[b] -= steps_c[s];
            }
        }
        // 4. the biases: the gradient fdiff itself, rate 1, no clipping (lane 0)
        if (lane == 0) {
            double step = fdiff / sqrt(wg[dim]);  wg[dim] += fdiff * fdiff;
            w[dim] -= isfinite(step) ? step : 0.0;
            step = fdiff / sqrt(cg[dim]);  cg[dim] += fdiff * fdiff;
            c[dim] -= isfinite(step) ? step : 0.0;
        }
        __syncwarp();  // lane 0's bias writes seen by every lane before the next record
    }
    if (lane == 0) { warp_cost[warp] = cost; warp_skipped[warp] = skipped; }
}
"""

MAX_DIM = 32 * 32      # the kernel's per-lane step arrays hold 32 components each
THREADS_PER_BLOCK = 256
WARPS_PER_SM = 64      # the most a multiprocessor keeps resident (2048 threads)
SHARED_IN_FLIGHT = 0.125  # default_warps: in-flight records a record shares its word with
_kernels: dict[int, Any] = {}


def default_warps(records: np.ndarray, vocab: int) -> int:
    """How many warps train at once by default, from the records (on the host).

    The trade-off is Hogwild's. Each more warp is more records per second,
    until the GPU is full, and more records in flight at once: a record
    whose word is in another in-flight record too reads its row stale, and
    one of the two steps may be lost. With W records in flight, a record
    shares its word with W * sum_i p_i^2 others on average, p_i being the
    share of the records that name word i (first ids, or second, whichever
    sum is larger). The default keeps that near ``SHARED_IN_FLIGHT``: W =
    1/8 / sum p_i^2, at least a block's 8 warps and at most what the GPU
    keeps resident. ``bench.glove --warps`` and ``examples.glove --threads``
    measure both sides (README).
    """
    import cupy

    shares = [np.bincount(records[name] - 1, minlength=vocab) / max(len(records), 1)
              for name in ("word1", "word2")]
    crowding = max(float(share @ share) for share in shares)
    resident = cupy.cuda.Device().attributes["MultiProcessorCount"] * WARPS_PER_SM
    wanted = int(SHARED_IN_FLIGHT / crowding) if crowding > 0 else resident
    return min(resident, max(THREADS_PER_BLOCK // 32, wanted))


def kernel(cupy: Any) -> Any:
    """The compiled kernel of the current GPU (compiled at the first call)."""
    device = cupy.cuda.Device().id
    if device not in _kernels:
        _kernels[device] = cupy.RawKernel(KERNEL, "glove_records")
    return _kernels[device]


def upload(records: np.ndarray, vocab: int, cupy: Any) -> Any:
    """``records`` (a ``RECORD`` array) checked on the host, then on the GPU as raw bytes."""
    for name in ("word1", "word2"):
        bad = np.flatnonzero((records[name] < 1) | (records[name] > vocab))
        if len(bad):
            raise ValueError(f"records {bad[0]}..: {len(bad)} of them name a word outside "
                             f"1..{vocab} in {name} (glove.c ids count from 1)")
    return cupy.asarray(np.ascontiguousarray(records).view(np.uint8))


def epoch(tables: tuple[Any, Any, Any, Any], records: Any, n: int,
          options: tuple[float, float, float, float], warps: int) -> tuple[Any, Any]:
    """One pass of glove.c's loop over the ``n`` uploaded records, ``warps`` Hogwild
    workers. Returns (the cost, records skipped), both still on the GPU."""
    import cupy

    word = tables[0]
    dim = word.shape[1] - 1
    if dim > MAX_DIM:
        raise ValueError(f"the GPU's record loop takes d <= {MAX_DIM}, got d = {dim}")
    threads = min(THREADS_PER_BLOCK, 32 * warps)
    blocks = -(-32 * warps // threads)
    cost = cupy.zeros(blocks * threads // 32, np.float64)
    skipped = cupy.zeros(blocks * threads // 32, np.int64)
    eta, x_max, alpha, clip = options
    kernel(cupy)((blocks,), (threads,), (*tables, records, np.int64(n), np.int32(dim),
                                          np.float64(eta), np.float64(x_max),
                                          np.float64(alpha), np.float64(clip), cost, skipped))
    return cost.sum(), skipped.sum()
