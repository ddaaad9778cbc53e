#include "antman_env.h"

#include "absl/status/status.h"
#include "xla/tsl/platform/logging.h"
#include "xla/tsl/util/env_var.h"

namespace antman_tf {

bool ReadBoolFromEnvVarOrDefault(const char* name, bool default_value) {
  bool value = default_value;
  const absl::Status status = tsl::ReadBoolFromEnvVar(name, default_value, &value);
  if (!status.ok()) {
    LOG(ERROR) << status.message();
    return default_value;
  }
  return value;
}

int64_t ReadInt64FromEnvVarOrDefault(const char* name, int64_t default_value) {
  int64_t value = default_value;
  const absl::Status status = tsl::ReadInt64FromEnvVar(name, default_value, &value);
  if (!status.ok()) {
    LOG(ERROR) << status.message();
    return default_value;
  }
  return value;
}

}  // namespace antman_tf
