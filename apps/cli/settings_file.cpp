#include "cli/settings_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "cli/cli_common.hpp"
#include "outbox/error.hpp"

namespace outbox::cli {
namespace {

// What a file that is not a regular file is, for the refusal.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

bool SettingsFile::open_to_others() const { return (mode & (S_IRWXG | S_IRWXO)) != 0; }

SettingsFile read_settings_file(const std::string& path, const std::string& what) {
  const std::string name = what + " " + path;
  if (path.find('\0') != std::string::npos) throw ConfigError(what + ": the path holds a NUL");
  // O_NONBLOCK: opening a FIFO with no writer would wait for one forever; the type check below
  // refuses it without reading.
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0) {
    throw ConfigError(name + ": cannot open it (" + std::strerror(errno) + ")");
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    throw ConfigError(name + ": cannot stat it (" + std::strerror(errno) + ")");
  }
  if (!S_ISREG(info.st_mode)) {
    throw ConfigError(name + " is " + kind_of(info.st_mode) +
                      "; name a regular file (a symlink to one is fine)");
  }
  const auto too_large = [&] {
    return ConfigError(name + " is larger than " + byte_size_text(kMaxSettingsFileBytes) +
                       "; is it the right file?");
  };
  if (static_cast<std::size_t>(info.st_size) > kMaxSettingsFileBytes) throw too_large();
  SettingsFile file;
  file.mode = info.st_mode & 07777;
  // Read to the end, but never more than the bound: the file may grow while it is read.
  char buffer[16384];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw ConfigError(name + ": cannot read it (" + std::strerror(errno) + ")");
    if (got == 0) break;
    file.content.append(buffer, static_cast<std::size_t>(got));
    if (file.content.size() > kMaxSettingsFileBytes) throw too_large();
  }
  return file;
}

void warn_if_open_to_others(const SettingsFile& file, const std::string& path,
                            const std::string& what) {
  if (!file.open_to_others()) return;
  std::cerr << "outbox: warning: " << what << " file " << path
            << " can be read by other users; chmod 600 it\n";
}

}  // namespace outbox::cli
