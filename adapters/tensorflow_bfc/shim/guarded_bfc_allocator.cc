#include "guarded_bfc_allocator.h"

#include <climits>
#include <cstdint>
#include <string>

#include "bfc_private.h"
#include "errors.h"

namespace antman_tf {

GuardedBFCAllocator::GuardedBFCAllocator(std::unique_ptr<tsl::BFCAllocator> bfc,
                                         PythonSubAllocator* sub_allocator,
                                         size_t total_memory, int64_t retry_timeout_us)
    : bfc_(std::move(bfc)),
      sub_allocator_(sub_allocator),
      retry_timeout_us_(retry_timeout_us),
      next_region_may_be_zero_(BFCPrivate::RoundedBytes(total_memory) == 0) {}

void* GuardedBFCAllocator::AllocateRaw(size_t alignment, size_t num_bytes) {
  return AllocateRaw(alignment, num_bytes, tsl::AllocationAttributes());
}

void* GuardedBFCAllocator::AllocateRaw(size_t alignment, size_t num_bytes,
                                       const tsl::AllocationAttributes& attributes) {
  GuardRequest(num_bytes);
  if (!attributes.retry_on_failure || retry_timeout_us_ == kTensorFlowRetryMicros) {
    return bfc_->AllocateRaw(alignment, num_bytes, attributes);
  }
  const int64_t millis = retry_timeout_us_ / 1000;
  return BFCPrivate::AllocateWithRetry(*bfc_, alignment, num_bytes,
                                       millis > INT_MAX ? INT_MAX : static_cast<int>(millis));
}

void GuardedBFCAllocator::GuardRequest(size_t num_bytes) {
  if (num_bytes > SIZE_MAX - 255) {
    throw GuardError(
        Name() + ": allocate_raw(" + std::to_string(num_bytes) + "): TensorFlow 2.21's "
        "RoundedBytes wraps sizes above 2^64-256 to 0, and a 0-byte rounded request is "
        "served from any free chunk, split at offset 0 (a zero-size chunk whose handle "
        "replaces its neighbour's); the adapter refused the call (D-BFC-2) [BFC-1]");
  }
  if (num_bytes == 0 || !next_region_may_be_zero_.load(std::memory_order_relaxed)) return;
  size_t limit, pool, next;
  BFCPrivate::Sizes(*bfc_, &limit, &pool, &next);
  if (next != 0) {
    next_region_may_be_zero_.store(false, std::memory_order_relaxed);
    return;
  }
  const size_t available = limit > pool ? (limit - pool) / 256 * 256 : 0;
  if (BFCPrivate::RoundedBytes(num_bytes) <= available) {
    throw GuardError(
        Name() + ": allocate_raw(" + std::to_string(num_bytes) + "): the allocator was built "
        "with a total memory whose RoundedBytes is 0 (0, or above 2^64-256, where it wraps), "
        "so its next region size is 0, and TensorFlow 2.21's BFCAllocator::Extend doubles it "
        "until it covers the request: forever, under its mutex (D-BFC-5); the adapter refused "
        "the call [BFC-8]");
  }
}

void GuardedBFCAllocator::GuardPointer(const void* ptr, const char* what,
                                       bool must_be_in_use) const {
  const PointerLookup found = BFCPrivate::Lookup(*bfc_, ptr);
  std::string reason;
  switch (found.kind) {
    case PointerKind::kNoRegion:
      reason = "no region holds it, and RegionManager::RegionFor LOG(FATAL)s (aborts the "
               "process)";
      break;
    case PointerKind::kBeforeRegion:
      reason = "it lies in no region, below the one RegionManager::RegionFor picks, and "
               "get_handle would read outside that region's handle table (undefined "
               "behaviour)";
      break;
    case PointerKind::kNoChunk:
      reason = "no chunk starts in its 256-byte slot, and CHECK(h != kInvalidChunkHandle) "
               "aborts the process";
      break;
    case PointerKind::kChunk:
      if (must_be_in_use && !found.in_use) {
        reason = "its chunk is not in use (a double free), and MarkFree's CHECK(c->in_use()) "
                 "aborts the process";
      }
      break;
  }
  if (reason.empty()) return;
  throw GuardError(bfc_->Name() + ": " + what + "(" + HexPointer(ptr) + "): in TensorFlow "
                   "2.21 " + reason + "; the adapter refused the call [BFC-6]");
}

bool GuardedBFCAllocator::IsChunkStart(const void* ptr, bool in_use) const {
  const PointerLookup found = BFCPrivate::Lookup(*bfc_, ptr);
  return found.kind == PointerKind::kChunk &&
         found.chunk_ptr == reinterpret_cast<uintptr_t>(ptr) && (found.in_use || !in_use);
}

void GuardedBFCAllocator::DeallocateRaw(void* ptr) {
  if (ptr != nullptr) GuardPointer(ptr, "deallocate_raw", true);
  bfc_->DeallocateRaw(ptr);
}

size_t GuardedBFCAllocator::RequestedSize(const void* ptr) const {
  GuardPointer(ptr, "requested_size", false);
  return bfc_->RequestedSize(ptr);
}

size_t GuardedBFCAllocator::AllocatedSize(const void* ptr) const {
  GuardPointer(ptr, "allocated_size", false);
  return bfc_->AllocatedSize(ptr);
}

int64_t GuardedBFCAllocator::AllocationId(const void* ptr) const {
  GuardPointer(ptr, "allocation_id", false);
  return bfc_->AllocationId(ptr);
}

}  // namespace antman_tf
