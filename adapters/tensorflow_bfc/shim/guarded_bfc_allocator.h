// TensorFlow's compiled tsl::BFCAllocator (or tensorflow::GPUBFCAllocator) as the adapter
// drives it: every call goes to TensorFlow's own code, except that
//
// - the retry of a failed allocation waits `retry_timeout_us` (in whole milliseconds, on the
//   real clock) through TensorFlow's own AllocatorRetry, instead of its fixed 10 s; with
//   10 s it is TensorFlow's public AllocateRaw, unchanged;
// - a call TensorFlow would answer by aborting the process (an unknown pointer, a double
//   free, a misaligned region), by looping forever (a next region size of 0) or by
//   corrupting its chunks (a size whose RoundedBytes wraps to 0) is refused with
//   antman_tf::GuardError, whose message says what TensorFlow would have done.
#ifndef ANTMAN_TF_BFC_GUARDED_BFC_ALLOCATOR_H_
#define ANTMAN_TF_BFC_GUARDED_BFC_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "python_sub_allocator.h"
#include "xla/tsl/framework/bfc_allocator.h"

namespace antman_tf {

inline constexpr int64_t kTensorFlowRetryMicros = 10'000'000;  // kMaxMillisToWait = 10000

class GuardedBFCAllocator final : public tsl::Allocator {
 public:
  GuardedBFCAllocator(std::unique_ptr<tsl::BFCAllocator> bfc, PythonSubAllocator* sub_allocator,
                      size_t total_memory, int64_t retry_timeout_us);

  std::string Name() override { return bfc_->Name(); }
  // The two-argument call is TensorFlow's: default attributes, so it retries.
  void* AllocateRaw(size_t alignment, size_t num_bytes) override;
  void* AllocateRaw(size_t alignment, size_t num_bytes,
                    const tsl::AllocationAttributes& attributes) override;
  void DeallocateRaw(void* ptr) override;
  bool TracksAllocationSizes() const override { return bfc_->TracksAllocationSizes(); }
  size_t RequestedSize(const void* ptr) const override;
  size_t AllocatedSize(const void* ptr) const override;
  int64_t AllocationId(const void* ptr) const override;
  std::optional<tsl::AllocatorStats> GetStats() override { return bfc_->GetStats(); }
  bool ClearStats() override { return bfc_->ClearStats(); }

  tsl::BFCAllocator& bfc() const { return *bfc_; }
  PythonSubAllocator* sub_allocator() const { return sub_allocator_; }
  int64_t retry_timeout_us() const { return retry_timeout_us_; }

  // Whether the pointer is the start of a chunk of this allocator (in use, if `in_use`).
  bool IsChunkStart(const void* ptr, bool in_use) const;

 private:
  void GuardRequest(size_t num_bytes);
  // Throws GuardError when TensorFlow would abort on `ptr` in `what`.
  void GuardPointer(const void* ptr, const char* what, bool must_be_in_use) const;

  std::unique_ptr<tsl::BFCAllocator> bfc_;
  PythonSubAllocator* sub_allocator_;  // owned by bfc_
  const int64_t retry_timeout_us_;
  // Built with a total memory whose RoundedBytes is 0 (0, or above 2^64-256, where it wraps):
  // the next region size is 0 until a shrink resets it, and Extend would double 0 forever.
  std::atomic<bool> next_region_may_be_zero_;
};

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_GUARDED_BFC_ALLOCATOR_H_
