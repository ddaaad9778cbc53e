// TensorFlow 2.21 logs through absl (LOG(ERROR) << ...), to stderr. The shim installs an absl
// LogSink that keeps every record of WARNING and above (SetForwardedMinSeverity) that
// TensorFlow, or the AntMan layer's C++, writes in this process; the adapter's Python side drains them after each call that may log and re-emits
// them on Python loggers, so that SPEC.md's "logs an error" is observable. The records are
// TensorFlow's own: their text and severity are not changed.
#ifndef ANTMAN_TF_BFC_TF_LOG_H_
#define ANTMAN_TF_BFC_TF_LOG_H_

#include <string>
#include <vector>

namespace antman_tf {

struct LogRecord {
  int severity;   // absl::LogSeverity: 0 INFO, 1 WARNING, 2 ERROR, 3 FATAL
  int verbosity;  // the VLOG level, or -1 for LOG
  std::string file;
  int line;
  std::string message;
};

// Installs the sink once per process.
void InstallLogForwarder();
// The records kept since the last call, oldest first; at most kMaxKept (the oldest are
// dropped, and one record says how many).
std::vector<LogRecord> DrainLogRecords();
bool LogRecordsPending();
// Records below this absl severity are not kept (default 1, WARNING: TensorFlow's INFO
// records are its memory dumps, chunk by chunk, on every failed retried allocation).
void SetForwardedMinSeverity(int severity);
// absl's minimum log level for the whole process: records below it are not even formatted.
void SetMinLogLevel(int severity);

}  // namespace antman_tf

#endif  // ANTMAN_TF_BFC_TF_LOG_H_
