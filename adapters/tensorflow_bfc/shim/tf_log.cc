#include "tf_log.h"

#include <atomic>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

#include "absl/log/globals.h"
#include "absl/log/log_entry.h"
#include "absl/log/log_sink.h"
#include "absl/log/log_sink_registry.h"

namespace antman_tf {

namespace {

constexpr size_t kMaxKept = 10000;

class Forwarder final : public absl::LogSink {
 public:
  void Send(const absl::LogEntry& entry) override {
    if (static_cast<int>(entry.log_severity()) < min_severity_.load(std::memory_order_relaxed)) {
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (records_.size() == kMaxKept) {
      records_.pop_front();
      ++dropped_;
    }
    records_.push_back({static_cast<int>(entry.log_severity()),
                        entry.verbosity() == absl::LogEntry::kNoVerbosityLevel
                            ? -1
                            : entry.verbosity(),
                        std::string(entry.source_filename()), entry.source_line(),
                        std::string(entry.text_message())});
    pending_.store(true, std::memory_order_release);
  }

  std::vector<LogRecord> Drain() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<LogRecord> out;
    if (dropped_ != 0) {
      out.push_back({1, -1, "tf_log.cc", 0,
                     std::to_string(dropped_) + " TensorFlow log records were dropped: more "
                     "than " + std::to_string(kMaxKept) + " were kept between two drains"});
      dropped_ = 0;
    }
    out.insert(out.end(), std::make_move_iterator(records_.begin()),
               std::make_move_iterator(records_.end()));
    records_.clear();
    pending_.store(false, std::memory_order_release);
    return out;
  }

  bool pending() const { return pending_.load(std::memory_order_acquire); }
  void set_min_severity(int severity) { min_severity_.store(severity); }

 private:
  std::mutex mu_;
  std::deque<LogRecord> records_;
  size_t dropped_ = 0;
  std::atomic<bool> pending_{false};
  std::atomic<int> min_severity_{1};  // WARNING
};

Forwarder* forwarder = nullptr;  // never destroyed: TensorFlow may log during exit
std::once_flag install_once;

}  // namespace

void InstallLogForwarder() {
  std::call_once(install_once, [] {
    forwarder = new Forwarder();
    absl::AddLogSink(forwarder);
  });
}

std::vector<LogRecord> DrainLogRecords() {
  return forwarder != nullptr ? forwarder->Drain() : std::vector<LogRecord>{};
}

bool LogRecordsPending() { return forwarder != nullptr && forwarder->pending(); }

void SetForwardedMinSeverity(int severity) {
  InstallLogForwarder();
  forwarder->set_min_severity(severity);
}

void SetMinLogLevel(int severity) {
  absl::SetMinLogLevel(static_cast<absl::LogSeverityAtLeast>(severity));
}


}  // namespace antman_tf
