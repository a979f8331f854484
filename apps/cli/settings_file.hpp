#pragma once
// One reader for every file a flag names (--config, --db-password-file, --admin-token-file,
// --kafka-properties-file): a file that never ends (/dev/zero), one that never opens (a FIFO
// with no writer), a directory or a device is refused with a message that says which it is,
// before anything is read; a regular file is read up to a bound. Symlinks are followed (secret
// mounts such as Kubernetes' are symlinks), and the file they end at is what is checked.

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace outbox::cli {

// Far more than any settings file, password or token outbox reads.
inline constexpr std::size_t kMaxSettingsFileBytes = std::size_t{1} << 20;

struct SettingsFile {
  std::string content;
  mode_t mode = 0;  // the permission bits of the file read
  // True when users other than the owner may read or write it.
  [[nodiscard]] bool open_to_others() const;
};

// Reads `path` whole. `what` names it in errors ("--db-password-file"). Throws ConfigError naming
// the file and what is wrong with it (missing, unreadable, not a regular file, over
// kMaxSettingsFileBytes); never its content. Blocks only on a slow file system.
SettingsFile read_settings_file(const std::string& path, const std::string& what);

// The warning for a file holding a secret that others may read; printed once per call, on stderr.
void warn_if_open_to_others(const SettingsFile& file, const std::string& path,
                            const std::string& what);

}  // namespace outbox::cli
