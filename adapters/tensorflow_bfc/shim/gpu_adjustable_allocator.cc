#include "gpu_adjustable_allocator.h"

#include <algorithm>
#include <cstddef>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "bfc_private.h"
#include "xla/tsl/platform/logging.h"

namespace antman_tf {

namespace {
constexpr size_t kMaxNextRegionAfterShrink = size_t{1} << 20;  // 1 MiB
}  // namespace

size_t GPUAdjustableAllocator::AdjustMemoryLimit(size_t new_limit, tsl::BFCAllocator* bfc) {
  absl::MutexLock lock(BFCPrivate::Mutex(*bfc));
  if (new_limit >= BFCPrivate::PoolBytesLocked(*bfc)) {
    BFCPrivate::SetMemoryLimitLocked(*bfc, new_limit);
    return new_limit;
  }
  const size_t remaining = FreeEmptyMemoryLocked(new_limit, bfc);
  size_t limit = new_limit;
  if (remaining > new_limit) {
    LOG(WARNING) << bfc->Name() << ": memory limit " << new_limit << " not reached: "
                 << remaining << " bytes are held by regions in use; the limit is "
                 << remaining;
    limit = remaining;
  }
  BFCPrivate::SetMemoryLimitLocked(*bfc, limit);
  return limit;
}

size_t GPUAdjustableAllocator::FreeEmptyMemory(size_t target, tsl::BFCAllocator* bfc) {
  absl::MutexLock lock(BFCPrivate::Mutex(*bfc));
  return FreeEmptyMemoryLocked(target, bfc);
}

size_t GPUAdjustableAllocator::FreeEmptyMemoryLocked(size_t target, tsl::BFCAllocator* bfc) {
  size_t pool = BFCPrivate::PoolBytesLocked(*bfc);
  if (target >= pool) return pool;
  absl::flat_hash_set<void*> release;
  for (const RegionUse& region : BFCPrivate::RegionsLocked(*bfc)) {
    if (pool <= target) break;
    if (!region.one_free_chunk) continue;
    release.insert(region.ptr);
    pool -= region.size;
  }
  if (!release.empty()) BFCPrivate::ReleaseRegionsLocked(*bfc, release);
  // size_t arithmetic, as AntMan's: a target that was not reached wraps to a huge gap.
  const size_t gap = target - pool;
  BFCPrivate::SetNextRegionSizeLocked(
      *bfc, BFCPrivate::RoundedBytes(
                std::min(std::max(gap, size_t{1}), kMaxNextRegionAfterShrink)));
  return BFCPrivate::PoolBytesLocked(*bfc);
}

MemPoolStats GPUAdjustableAllocator::GetMemPoolStats(tsl::BFCAllocator* bfc) {
  absl::MutexLock lock(BFCPrivate::Mutex(*bfc));
  MemPoolStats stats{0, 0};
  for (const RegionUse& region : BFCPrivate::RegionsLocked(*bfc)) {
    stats.pool_bytes += region.size;
    if (region.any_in_use) stats.stable_bytes += region.size;
  }
  return stats;
}

}  // namespace antman_tf
