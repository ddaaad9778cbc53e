// AntMan's GPUAdjustableAllocator, written from SPEC.md section 2.4 (ADJ) over TensorFlow
// 2.21's compiled tsl::BFCAllocator: it changes the allocator's limit at run time, releases
// whole free regions in ascending address order to shrink it, resets the next region size
// after a shrink, and reports the pool and the part of it in use. Like AntMan's code it works
// on the BFC allocator's private state (here through the friend class, bfc_private.h), under
// the allocator's own mutex; the deviations of SPEC.md D-ADJ-1..3 are taken (the statistics
// are read under the lock, released chunk handles go back to TensorFlow's free list, and the
// pool is returned when the target equals it).
#ifndef ANTMAN_TF_BFC_GPU_ADJUSTABLE_ALLOCATOR_H_
#define ANTMAN_TF_BFC_GPU_ADJUSTABLE_ALLOCATOR_H_

#include <cstddef>

#include "xla/tsl/framework/bfc_allocator.h"

namespace antman_tf {

struct MemPoolStats {
  size_t pool_bytes;    // the sum of the region sizes
  size_t stable_bytes;  // the sum of the sizes of the regions with a chunk in use
};

class GPUAdjustableAllocator {
 public:
  // ADJ-1, ADJ-2: the new limit, or the pool left when a shrink fell short.
  size_t AdjustMemoryLimit(size_t new_limit, tsl::BFCAllocator* bfc);
  // ADJ-3, ADJ-4: the pool afterwards.
  size_t FreeEmptyMemory(size_t target, tsl::BFCAllocator* bfc);
  // ADJ-5.
  MemPoolStats GetMemPoolStats(tsl::BFCAllocator* bfc);

 private:
  static size_t FreeEmptyMemoryLocked(size_t target, tsl::BFCAllocator* bfc);
};

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_GPU_ADJUSTABLE_ALLOCATOR_H_
