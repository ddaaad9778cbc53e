// Access to tsl::BFCAllocator's private state, through the friend class its header names.
//
// xla/tsl/framework/bfc_allocator.h (TensorFlow 2.21) declares
// `friend class GPUBFCAllocatorPrivateMethodsTest;` inside namespace tsl, for TensorFlow's own
// tests. TensorFlow ships no definition of that class, so this header defines it: every read
// or write of the allocator's regions, chunks, limit, pool and next region size that the
// adapter and the AntMan layer need goes through it, as AntMan reached TensorFlow 1.15's
// private state by adding friends to the same header. Nothing here changes TensorFlow's
// algorithm: the functions either read under the allocator's mutex, call its own private
// members, or make the writes AntMan's GPUAdjustableAllocator makes (limit, next region
// size, releasing whole free regions).
#ifndef ANTMAN_TF_BFC_BFC_PRIVATE_H_
#define ANTMAN_TF_BFC_BFC_PRIVATE_H_

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "xla/tsl/framework/bfc_allocator.h"

namespace antman_tf {

struct ChunkView {
  uintptr_t ptr;
  size_t size;
  size_t requested_size;
  bool in_use;
  int64_t allocation_id;
  int bin_num;
};

struct RegionView {
  uintptr_t ptr;
  size_t size;
  std::vector<ChunkView> chunks;
};

struct MemoryMapView {
  size_t memory_limit;
  size_t pool_bytes;
  size_t next_region_size;
  std::vector<RegionView> regions;
};

struct BinDebugView {
  size_t total_bytes_in_use;
  size_t total_bytes_in_bin;
  size_t total_requested_bytes_in_use;
  size_t total_chunks_in_use;
  size_t total_chunks_in_bin;
};

// What TensorFlow's RegionManager finds for a pointer (RegionFor + get_handle).
enum class PointerKind {
  kNoRegion,      // past every region: RegionFor LOG(FATAL)s
  kBeforeRegion,  // in a gap below the region RegionFor picks: get_handle indexes out of range
  kNoChunk,       // no chunk handle at that 256-byte slot: the callers CHECK-fail
  kChunk,         // a chunk's slot: TensorFlow uses that chunk (the start or within its first 256 bytes)
};

struct PointerLookup {
  PointerKind kind;
  uintptr_t chunk_ptr = 0;
  bool in_use = false;
};

// A region as AntMan's FreeEmptyMemory and GetMemPoolStats see it.
struct RegionUse {
  void* ptr;
  size_t size;
  bool one_free_chunk;  // its first chunk spans the whole region and is not in use
  bool any_in_use;      // at least one of its chunks is in use
};

}  // namespace antman_tf

namespace tsl {

class GPUBFCAllocatorPrivateMethodsTest {
 public:
  using BinDebugArray = std::array<antman_tf::BinDebugView, BFCAllocator::kNumBins>;

  static constexpr int kNumBins = BFCAllocator::kNumBins;

  static size_t RoundedBytes(size_t bytes) { return BFCAllocator::RoundedBytes(bytes); }

  // TensorFlow's BinNumForSize (an inline member of the header; it reads no state).
  static int BinNumForSize(BFCAllocator& a, size_t bytes) { return a.BinNumForSize(bytes); }

  static bool AllowGrowth(const BFCAllocator& a) { return a.opts_.allow_growth; }
  static bool GarbageCollection(const BFCAllocator& a) { return a.opts_.garbage_collection; }

  static absl::Mutex& Mutex(BFCAllocator& a) { return a.mutex_; }

  // AllocateRawInternalWithRetry, with the wait given instead of its constant 10 s
  // (kMaxMillisToWait): one attempt, then TensorFlow's AllocatorRetry.
  static void* AllocateWithRetry(BFCAllocator& a, size_t alignment, size_t num_bytes,
                                 int max_millis_to_wait) {
    void* ptr = a.AllocateRawInternal(alignment, num_bytes, false, 0);
    if (ptr != nullptr) return ptr;
    return a.retry_helper_.AllocateRaw(
        [&a](size_t al, size_t nb, bool verbose) {
          return a.AllocateRawInternal(al, nb, verbose, 0);
        },
        max_millis_to_wait, alignment, num_bytes);
  }

  // The limit, the pool and the next region size, under the allocator's mutex.
  static void Sizes(BFCAllocator& a, size_t* limit, size_t* pool, size_t* next) {
    absl::MutexLock lock(a.mutex_);
    *limit = a.memory_limit_;
    *pool = PoolBytesLocked(a);
    *next = a.curr_region_allocation_bytes_;
  }

  // The next region size, set under the mutex (for an allocator no other thread uses yet).
  static void SetNextRegionSize(BFCAllocator& a, size_t size) {
    absl::MutexLock lock(a.mutex_);
    a.curr_region_allocation_bytes_ = size;
  }

  static antman_tf::PointerLookup Lookup(BFCAllocator& a, const void* ptr) {
    absl::MutexLock lock(a.mutex_);
    return LookupLocked(a, ptr);
  }

  static antman_tf::MemoryMapView MemoryMap(BFCAllocator& a) {
    absl::MutexLock lock(a.mutex_);
    antman_tf::MemoryMapView view{a.memory_limit_, PoolBytesLocked(a),
                                  a.curr_region_allocation_bytes_, {}};
    for (const auto& region : a.region_manager_.regions()) {
      antman_tf::RegionView r{reinterpret_cast<uintptr_t>(region.ptr()), region.memory_size(),
                              {}};
      for (BFCAllocator::ChunkHandle h = region.get_handle(region.ptr());
           h != BFCAllocator::kInvalidChunkHandle;) {
        const BFCAllocator::Chunk* c = a.ChunkFromHandle(h);
        r.chunks.push_back({reinterpret_cast<uintptr_t>(c->ptr), c->size, c->requested_size,
                            c->in_use(), c->allocation_id, c->bin_num});
        h = c->next;
      }
      view.regions.push_back(std::move(r));
    }
    return view;
  }

  // TensorFlow's own get_bin_debug_info, under the mutex it requires.
  static BinDebugArray BinDebugInfo(BFCAllocator& a) {
    absl::MutexLock lock(a.mutex_);
    const auto infos = a.get_bin_debug_info();
    BinDebugArray out;
    for (int b = 0; b < kNumBins; ++b) {
      out[b] = {infos[b].total_bytes_in_use, infos[b].total_bytes_in_bin,
                infos[b].total_requested_bytes_in_use, infos[b].total_chunks_in_use,
                infos[b].total_chunks_in_bin};
    }
    return out;
  }

  // --- for AntMan's GPUAdjustableAllocator: call with Mutex(a) held ----------------------

  static size_t PoolBytesLocked(BFCAllocator& a) {
    return static_cast<size_t>(a.stats_.pool_bytes.value_or(0));
  }

  // AntMan's change of the limit: memory_limit_ and the bytes_limit stat.
  static void SetMemoryLimitLocked(BFCAllocator& a, size_t limit) {
    a.memory_limit_ = limit;
    a.stats_.bytes_limit = static_cast<int64_t>(limit);
  }

  static void SetNextRegionSizeLocked(BFCAllocator& a, size_t size) {
    a.curr_region_allocation_bytes_ = size;
  }

  // The regions in ascending address order.
  static std::vector<antman_tf::RegionUse> RegionsLocked(BFCAllocator& a) {
    std::vector<antman_tf::RegionUse> out;
    for (const auto& region : a.region_manager_.regions()) {
      const BFCAllocator::ChunkHandle first = region.get_handle(region.ptr());
      const BFCAllocator::Chunk* c = a.ChunkFromHandle(first);
      bool any_in_use = false;
      for (BFCAllocator::ChunkHandle h = first; h != BFCAllocator::kInvalidChunkHandle;) {
        const BFCAllocator::Chunk* chunk = a.ChunkFromHandle(h);
        any_in_use = any_in_use || chunk->in_use();
        h = chunk->next;
      }
      out.push_back({region.ptr(), region.memory_size(),
                     c->size == region.memory_size() && !c->in_use(), any_in_use});
    }
    return out;
  }

  // TensorFlow's DeallocateRegions: removes the regions' chunks from the bins, returns their
  // handles, frees each region through the sub-allocator (in address order) and lowers the
  // pool.
  static void ReleaseRegionsLocked(BFCAllocator& a, const absl::flat_hash_set<void*>& ptrs) {
    a.DeallocateRegions(ptrs);
  }

 private:
  static antman_tf::PointerLookup LookupLocked(BFCAllocator& a, const void* ptr) {
    using antman_tf::PointerKind;
    const auto& regions = a.region_manager_.regions();
    auto it = std::upper_bound(
        regions.begin(), regions.end(), ptr,
        [](const void* p, const BFCAllocator::AllocationRegion& r) { return p < r.end_ptr(); });
    if (it == regions.end()) return {PointerKind::kNoRegion};
    if (ptr < it->ptr()) return {PointerKind::kBeforeRegion};
    const BFCAllocator::ChunkHandle h = it->get_handle(ptr);
    if (h == BFCAllocator::kInvalidChunkHandle) return {PointerKind::kNoChunk};
    const BFCAllocator::Chunk* c = a.ChunkFromHandle(h);
    return {PointerKind::kChunk, reinterpret_cast<uintptr_t>(c->ptr), c->in_use()};
  }
};

}  // namespace tsl

namespace antman_tf {
using BFCPrivate = tsl::GPUBFCAllocatorPrivateMethodsTest;
}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_BFC_PRIVATE_H_
