// AntMan's GPUVMemAllocator, written from SPEC.md section 2.3 (VMEM) over TensorFlow 2.21's
// allocators: every allocation goes to the device allocator first, without retry; a device
// failure falls back to a pinned-host BFC allocator (GPUHost_<id>_bfc). Frees and per-pointer
// queries are routed by ownership, and the stats are the device's with the host's peak added.
//
// As in SPEC.md's deviations, unlike AntMan's code: the allocator holds no lock of its own
// while the host side retries (D-VMEM-1: only the set of device pointers is locked, for the
// time of an insert, erase or lookup), and a pointer neither side knows raises
// InvalidPointer instead of reaching the host BFC's CHECK (D-VMEM-2; whether the host BFC
// knows it is read through its private state, bfc_private.h).
#ifndef ANTMAN_TF_BFC_GPU_VMEM_ALLOCATOR_H_
#define ANTMAN_TF_BFC_GPU_VMEM_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>

#include "xla/tsl/framework/allocator.h"

namespace antman_tf {

class GPUVMemAllocator final : public tsl::Allocator {
 public:
  // Reads TF_RO_PLANNED_GPU (VMEM-6, ENV-5).
  GPUVMemAllocator(std::shared_ptr<tsl::Allocator> device_allocator,
                   std::shared_ptr<tsl::Allocator> host_allocator, int tf_gpu_id,
                   int64_t physical_total_memory);

  std::string Name() override { return name_; }
  void* AllocateRaw(size_t alignment, size_t num_bytes) override;
  void* AllocateRaw(size_t alignment, size_t num_bytes,
                    const tsl::AllocationAttributes& attributes) override;
  void DeallocateRaw(void* ptr) override;
  bool TracksAllocationSizes() const override;
  size_t RequestedSize(const void* ptr) const override;
  size_t AllocatedSize(const void* ptr) const override;
  int64_t AllocationId(const void* ptr) const override;
  std::optional<tsl::AllocatorStats> GetStats() override;
  bool ClearStats() override;

  tsl::Allocator* device_allocator() const { return device_.get(); }
  tsl::Allocator* host_allocator() const { return host_.get(); }
  int64_t memory_planned() const { return memory_planned_; }

 private:
  void* AllocateOnDevice(size_t alignment, size_t num_bytes);
  bool IsDevicePointer(const void* ptr) const;
  // Checks that the host allocator knows `ptr` (as a chunk start; in use for a free) before
  // a host call, and names this allocator in the error of a pointer neither side knows.
  template <typename Result>
  Result OnHost(const void* ptr, const char* what, bool must_be_in_use,
                const std::function<Result()>& call) const;
  int64_t MergedPeak();

  const std::shared_ptr<tsl::Allocator> device_;
  const std::shared_ptr<tsl::Allocator> host_;
  const std::string name_;
  int64_t memory_planned_ = 0;
  mutable std::mutex device_ptrs_mu_;
  std::unordered_set<const void*> device_ptrs_;
};

// What maybe_create_gpu_vmem_allocator reads at each call (VMEM-1, VMEM-2, ENV-5): whether
// TF_GPU_VMEM is on, and the host limit in bytes from TF_CUDA_HOST_MEM_LIMIT_IN_MB.
struct VMemSettings {
  bool enabled;
  size_t host_limit_bytes;
};
VMemSettings ReadVMemSettings();

// AntMan's maybe_create_gpu_vmem_allocator: nullptr when TF_GPU_VMEM is false (the caller
// keeps gpu_allocator); otherwise a GPUVMemAllocator over gpu_allocator and a host BFC that
// `make_host_bfc(limit, name)` builds (growth on, garbage collection off).
std::unique_ptr<GPUVMemAllocator> MaybeCreateGPUVMemAllocator(
    std::shared_ptr<tsl::Allocator> gpu_allocator,
    const std::function<std::shared_ptr<tsl::Allocator>(size_t, const std::string&)>&
        make_host_bfc,
    int tf_gpu_id, int64_t physical_total_memory);

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_GPU_VMEM_ALLOCATOR_H_
