#pragma once
// `--config outbox.toml`: settings read with toml++ and handed to CLI11 as if given on the
// command line, below the real flags and the environment. The file has one table per command
// ([relay], [admin], [status], ...); a key at the top applies to the command that runs, if it
// has such a flag (never demo, bench, postgres or kafka-mock, which start servers of their own).
// Keys are the flags' long names without the dashes. Every key is checked against the flags of its
// command, and an unknown one is an error naming the file, the table and the key; so is a value
// whose TOML type is not the flag's (FlagValue), without quoting it, and a key nested more than 64
// deep. The file is read by read_settings_file (settings_file.hpp).
//
//   log-format = "json"
//   db = "host=db.internal dbname=orders user=outbox"
//   [relay]
//   kafka-brokers = "kafka-1:9092,kafka-2:9092"
//   kafka-property = ["security.protocol=ssl"]
//   metrics-listen = "127.0.0.1:9464"

#include <CLI/CLI.hpp>
#include <map>
#include <memory>
#include <set>
#include <string>

namespace outbox::cli {

// What a flag takes, so that a value of another TOML type is refused before CLI11 reads it (a
// string under an integer's key would be quoted back in CLI11's error: it may be a password).
enum class FlagValue { boolean, integer, text, texts };

// The file --config names, as read_settings_file() read it when the flag was parsed.
struct ConfigSource {
  std::string path;
  std::string content;
  bool read = false;
  bool open_to_others = false;
};

class TomlConfig final : public CLI::Config {
 public:
  using Flags = std::map<std::string, std::map<std::string, FlagValue>>;
  // `flags`: for each command ("" for the program itself), the long names of its flags and what
  // each takes. `app` tells, when the file is read (after the command line), which command runs:
  // its table and the top-level keys apply.
  TomlConfig(Flags flags, const CLI::App& app, std::shared_ptr<const ConfigSource> source)
      : flags_(std::move(flags)), app_(&app), source_(std::move(source)) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }
  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override;

 private:
  Flags flags_;
  const CLI::App* app_;
  std::shared_ptr<const ConfigSource> source_;
};

// Sets up --config on `app` once every command is registered.
void add_config_option(CLI::App& app);

}  // namespace outbox::cli
