#include "gpu_vmem_allocator.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "antman_env.h"
#include "errors.h"
#include "guarded_bfc_allocator.h"
#include "xla/tsl/platform/logging.h"

namespace antman_tf {

namespace {

constexpr int64_t kDefaultHostMemLimitInMB = int64_t{1} << 16;  // 64 GiB
constexpr int64_t kDefaultPlannedGpuPercent = 100;

}  // namespace

GPUVMemAllocator::GPUVMemAllocator(std::shared_ptr<tsl::Allocator> device_allocator,
                                   std::shared_ptr<tsl::Allocator> host_allocator,
                                   int tf_gpu_id, int64_t physical_total_memory)
    : device_(std::move(device_allocator)),
      host_(std::move(host_allocator)),
      name_("GPUVMem_" + std::to_string(tf_gpu_id) + "_bfc") {
  if (physical_total_memory < 0) {
    LOG(ERROR) << name_ << ": physical_total_memory " << physical_total_memory
               << " < 0; using 0";
    physical_total_memory = 0;
  }
  const int64_t percent =
      ReadInt64FromEnvVarOrDefault("TF_RO_PLANNED_GPU", kDefaultPlannedGpuPercent);
  memory_planned_ =
      static_cast<int64_t>(static_cast<double>(physical_total_memory * percent) / 100.0);
}

void* GPUVMemAllocator::AllocateOnDevice(size_t alignment, size_t num_bytes) {
  const tsl::AllocationAttributes no_retry(/*retry_on_failure=*/false,
                                           /*allocation_will_be_logged=*/false, nullptr);
  void* ptr = device_->AllocateRaw(alignment, num_bytes, no_retry);
  if (ptr != nullptr) {
    std::lock_guard<std::mutex> lock(device_ptrs_mu_);
    device_ptrs_.insert(ptr);
  }
  return ptr;
}

// The two-argument call: host fallback with the host's retry, no planned-memory check (VMEM-4).
void* GPUVMemAllocator::AllocateRaw(size_t alignment, size_t num_bytes) {
  if (void* ptr = AllocateOnDevice(alignment, num_bytes)) return ptr;
  // No lock of ours is held: frees made through this allocator wake the host's retry.
  return host_->AllocateRaw(alignment, num_bytes);
}

// The three-argument call: the planned-memory check, then the caller's attributes (VMEM-5).
void* GPUVMemAllocator::AllocateRaw(size_t alignment, size_t num_bytes,
                                    const tsl::AllocationAttributes& attributes) {
  if (void* ptr = AllocateOnDevice(alignment, num_bytes)) return ptr;
  const int64_t peak = MergedPeak();
  if (peak > memory_planned_) {
    LOG(WARNING) << name_ << ": host memory allocation of " << num_bytes
                 << " bytes refused: device peak + host peak " << peak
                 << " is beyond the planned memory " << memory_planned_;
    return nullptr;
  }
  return host_->AllocateRaw(alignment, num_bytes, attributes);
}

bool GPUVMemAllocator::IsDevicePointer(const void* ptr) const {
  std::lock_guard<std::mutex> lock(device_ptrs_mu_);
  return device_ptrs_.count(ptr) != 0;
}

template <typename Result>
Result GPUVMemAllocator::OnHost(const void* ptr, const char* what, bool must_be_in_use,
                                const std::function<Result()>& call) const {
  const std::string unknown = name_ + "." + what + "(" + HexPointer(ptr) +
                              "): pointer is neither a live device allocation nor known to "
                              "the host allocator";
  if (auto* host_bfc = dynamic_cast<const GuardedBFCAllocator*>(host_.get())) {
    if (!host_bfc->IsChunkStart(ptr, must_be_in_use)) throw InvalidPointer(unknown);
    return call();
  }
  try {
    return call();
  } catch (const InvalidPointer& error) {
    throw InvalidPointer(unknown + " (" + error.what() + ")");
  }
}

void GPUVMemAllocator::DeallocateRaw(void* ptr) {
  if (ptr == nullptr) return;
  bool on_device;
  {
    // Of two frees of one device pointer, one erases it; the other goes to the host side.
    std::lock_guard<std::mutex> lock(device_ptrs_mu_);
    on_device = device_ptrs_.erase(ptr) != 0;
  }
  if (on_device) {
    device_->DeallocateRaw(ptr);
    return;
  }
  OnHost<int>(ptr, "deallocate_raw", true, [&] {
    host_->DeallocateRaw(ptr);
    return 0;
  });
}

bool GPUVMemAllocator::TracksAllocationSizes() const {
  return device_->TracksAllocationSizes();
}

size_t GPUVMemAllocator::RequestedSize(const void* ptr) const {
  if (IsDevicePointer(ptr)) return device_->RequestedSize(ptr);
  return OnHost<size_t>(ptr, "requested_size", false,
                        [&] { return host_->RequestedSize(ptr); });
}

size_t GPUVMemAllocator::AllocatedSize(const void* ptr) const {
  if (IsDevicePointer(ptr)) return device_->AllocatedSize(ptr);
  return OnHost<size_t>(ptr, "allocated_size", false,
                        [&] { return host_->AllocatedSize(ptr); });
}

int64_t GPUVMemAllocator::AllocationId(const void* ptr) const {
  if (IsDevicePointer(ptr)) return device_->AllocationId(ptr);
  return OnHost<int64_t>(ptr, "allocation_id", false,
                         [&] { return host_->AllocationId(ptr); });
}

int64_t GPUVMemAllocator::MergedPeak() {
  const std::optional<tsl::AllocatorStats> device = device_->GetStats();
  const std::optional<tsl::AllocatorStats> host = host_->GetStats();
  return (device ? device->peak_bytes_in_use : 0) + (host ? host->peak_bytes_in_use : 0);
}

std::optional<tsl::AllocatorStats> GPUVMemAllocator::GetStats() {
  std::optional<tsl::AllocatorStats> merged = device_->GetStats();
  if (!merged) return std::nullopt;
  const std::optional<tsl::AllocatorStats> host = host_->GetStats();
  merged->peak_bytes_in_use += host ? host->peak_bytes_in_use : 0;
  return merged;
}

bool GPUVMemAllocator::ClearStats() {
  const bool device = device_->ClearStats();
  const bool host = host_->ClearStats();
  return device && host;
}

VMemSettings ReadVMemSettings() {
  VMemSettings settings{ReadBoolFromEnvVarOrDefault("TF_GPU_VMEM", true), 0};
  int64_t mb = ReadInt64FromEnvVarOrDefault("TF_CUDA_HOST_MEM_LIMIT_IN_MB",
                                            kDefaultHostMemLimitInMB);
  constexpr int64_t kMaxMB = std::numeric_limits<int64_t>::max() >> 20;
  if (mb < 0 || mb > kMaxMB) {
    LOG(ERROR) << "TF_CUDA_HOST_MEM_LIMIT_IN_MB=" << mb << " is out of range [0, " << kMaxMB
               << "]; using the default " << kDefaultHostMemLimitInMB;
    mb = kDefaultHostMemLimitInMB;
  }
  settings.host_limit_bytes = static_cast<size_t>(mb) << 20;
  return settings;
}

std::unique_ptr<GPUVMemAllocator> MaybeCreateGPUVMemAllocator(
    std::shared_ptr<tsl::Allocator> gpu_allocator,
    const std::function<std::shared_ptr<tsl::Allocator>(size_t, const std::string&)>&
        make_host_bfc,
    int tf_gpu_id, int64_t physical_total_memory) {
  const VMemSettings settings = ReadVMemSettings();
  if (!settings.enabled) return nullptr;
  std::shared_ptr<tsl::Allocator> host =
      make_host_bfc(settings.host_limit_bytes, "GPUHost_" + std::to_string(tf_gpu_id) + "_bfc");
  return std::make_unique<GPUVMemAllocator>(std::move(gpu_allocator), std::move(host),
                                            tf_gpu_id, physical_total_memory);
}

}  // namespace antman_tf
