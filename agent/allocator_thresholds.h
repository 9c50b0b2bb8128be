#pragma once

#include <malloc.h>

namespace dlion::agent {

// The agent's glibc allocator thresholds, set first thing in main(); the
// plain LibTorch loop that benchmarks measure the engine against sets the
// same, so a ratio compares training loops, not allocator heuristics.
inline void setAllocatorThresholds()
{
    // A fixed threshold, glibc's largest: only blocks of 32 MiB and more get
    // their own mappings. glibc's default raises it to the largest block
    // freed so far and keeps twice that free in its heaps: an agent held
    // 250 MB after its start instead of 180 (LeNet-5, one worker). A lower
    // one (it was 1 MiB) maps, faults in and unmaps every step's larger
    // blocks: on an AVX-512 machine oneDNN's LeNet-5 step has one over
    // 1 MiB, and a step took 900 page faults and three times as long. Peak
    // RSS is the same at 1, 2, 8, 16 and 32 MiB (179-185 MB).
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    // A fixed threshold also freezes the trim threshold at 128 KiB: every
    // step's freed activations were handed back (madvise) and faulted in
    // again by the next, 12% of a LeNet-5 step. At 16 MiB each 250-sample
    // chunk of an evaluation still freed 17 MB at its heap's top: 35,000
    // page faults a second, and a 20 s run took 35-55 s instead of 27.
    // 64 MiB of free heap top kept per arena costs no measured peak RSS.
    mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

} // namespace dlion::agent
