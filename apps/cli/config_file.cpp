#include "cli/config_file.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <cstdlib>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/command.hpp"
#include "cli/settings_file.hpp"
#include "outbox/error.hpp"
#include "outbox/text.hpp"

namespace outbox::cli {
namespace {

// A key whose environment variable, when set, wins over the file (flags win over both).
const std::map<std::string, std::string> kEnvironmentFirst = {
    {"db", "OUTBOX_DATABASE_URL"},
    {"db-password-file", "OUTBOX_DATABASE_PASSWORD_FILE"},
    {"log-format", "OUTBOX_LOG_FORMAT"},
};

bool environment_wins(const std::string& key) {
  const auto it = kEnvironmentFirst.find(key);
  if (it == kEnvironmentFirst.end()) return false;
  const char* value = std::getenv(it->second.c_str());
  return value != nullptr && *value != '\0';
}

// A key nests a table per dot; toml++ builds them recursively, and 50,000 levels overflowed the
// stack. outbox reads two ([command] key); a line with more dots (outside strings and comments)
// than any real setting has is refused before toml++ sees it.
constexpr int kMaxDotsPerLine = 64;

void check_nesting(const std::string& text) {
  enum class In { code, basic, literal, multi_basic, multi_literal, comment } in = In::code;
  int line = 1;
  int dots = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const auto ahead = [&](std::string_view s) { return text.compare(i, s.size(), s) == 0; };
    if (c == '\n') {
      ++line;
      dots = 0;
      if (in == In::comment || in == In::basic || in == In::literal) in = In::code;
      continue;
    }
    switch (in) {
      case In::code:
        if (c == '.' && ++dots > kMaxDotsPerLine) {
          throw CLI::ConfigError(fmt::format(
              "--config: line {}: a key more than {} levels deep; outbox's settings are "
              "[command] key = value",
              line, kMaxDotsPerLine));
        }
        if (ahead("\"\"\""))
          in = In::multi_basic, i += 2;
        else if (ahead("'''"))
          in = In::multi_literal, i += 2;
        else if (c == '"')
          in = In::basic;
        else if (c == '\'')
          in = In::literal;
        else if (c == '#')
          in = In::comment;
        break;
      case In::basic:
        if (c == '\\')
          ++i;
        else if (c == '"')
          in = In::code;
        break;
      case In::literal:
        if (c == '\'') in = In::code;
        break;
      case In::multi_basic:
        if (c == '\\')
          ++i;
        else if (ahead("\"\"\""))
          in = In::code, i += 2;
        break;
      case In::multi_literal:
        if (ahead("'''")) in = In::code, i += 2;
        break;
      case In::comment:
        break;
    }
  }
}

const char* type_wanted(FlagValue wanted) {
  switch (wanted) {
    case FlagValue::boolean:
      return "true or false";
    case FlagValue::integer:
      return "a whole number (no quotes)";
    case FlagValue::text:
      return "a string in quotes, as on the command line (\"30s\", \"0\")";
    case FlagValue::texts:
      return "a string in quotes or an array of them";
  }
  return "";
}

// A TOML value as the text a flag takes; `wanted` is what the flag takes. Never quotes the value
// in an error: it may be a password typed under the wrong key.
std::string scalar_text(const toml::node& node, FlagValue wanted, const std::string& where) {
  const auto refuse = [&](const char* got) {
    return CLI::ConfigError(where + ": takes " + type_wanted(wanted) + ", not " + got);
  };
  if (const auto* s = node.as_string()) {
    if (wanted != FlagValue::text && wanted != FlagValue::texts) throw refuse("a string");
    if (s->get().find('\0') != std::string::npos) {
      throw CLI::ConfigError(where + ": the string holds a NUL character (\\u0000)");
    }
    return s->get();
  }
  if (const auto* i = node.as_integer()) {
    if (wanted != FlagValue::integer) throw refuse("a number");
    return std::to_string(i->get());
  }
  if (const auto* b = node.as_boolean()) {
    if (wanted != FlagValue::boolean) throw refuse("a boolean");
    return b->get() ? "true" : "false";
  }
  throw refuse(node.is_floating_point() ? "a fraction"
               : node.is_array()        ? "an array"
               : node.is_table()        ? "a table"
                                        : "a date or time");
}

std::vector<std::string> inputs(const toml::node& node, FlagValue wanted,
                                const std::string& where) {
  std::vector<std::string> out;
  if (const auto* array = node.as_array(); array != nullptr && wanted == FlagValue::texts) {
    for (const toml::node& element : *array) out.push_back(scalar_text(element, wanted, where));
    return out;
  }
  out.push_back(scalar_text(node, wanted, where));
  return out;
}

// True when `key` = `node` holds a secret: a connection string with a password, a Kafka
// property whose value is one.
bool holds_secret(const std::string& key, const toml::node& node) {
  bool secret = false;
  const auto look = [&](const toml::node& value) {
    const auto* s = value.as_string();
    if (s == nullptr) return;
    if (key == "db") secret = secret || !outbox::connection_secrets(s->get()).empty();
    if (key == "kafka-property") {
      const auto eq = s->get().find('=');
      secret = secret || (eq != std::string::npos &&
                          outbox::is_secret_kafka_property(s->get().substr(0, eq)));
    }
  };
  if (const auto* array = node.as_array()) {
    for (const toml::node& element : *array) look(element);
  } else {
    look(node);
  }
  return secret;
}

// The file's text: as read when --config was parsed, else from `input` up to the same bound.
std::string config_text(const ConfigSource* source, std::istream& input) {
  if (source != nullptr && source->read) return source->content;
  std::string text;
  char buffer[16384];
  while (input.read(buffer, sizeof buffer) || input.gcount() > 0) {
    text.append(buffer, static_cast<std::size_t>(input.gcount()));
    if (text.size() > kMaxSettingsFileBytes) {
      throw CLI::ConfigError("--config: the file is larger than 1MiB; is it the right file?");
    }
  }
  return text;
}

}  // namespace

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  const std::string text = config_text(source_.get(), input);
  check_nesting(text);
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error& error) {
    std::ostringstream where;
    where << error.source().begin;
    throw CLI::ConfigError(
        fmt::format("--config: not TOML at {}: {}", where.str(), std::string(error.description())));
  }
  // The command this run executes, as the parser found it (a flag value that happens to be a
  // command's name cannot fool it).
  std::string chosen;
  for (const CLI::App* command : app_->get_subcommands()) chosen = command->get_name();
  // outbox-dev's commands start throwaway servers unless told otherwise: top-level keys never
  // reach them.
  const bool takes_shared = program_of(chosen) != kDevProgram;
  std::vector<CLI::ConfigItem> out;
  const auto has = [&](const std::string& command, const std::string& key) {
    const auto it = flags_.find(command);
    return it != flags_.end() && it->second.contains(key);
  };
  bool secret = false;
  const auto add = [&](std::vector<std::string> parents, const std::string& key,
                       const toml::node& node, const std::string& where) {
    if (environment_wins(key)) return;
    CLI::ConfigItem item;
    const std::string command = parents.empty() ? "" : parents.front();
    item.parents = std::move(parents);
    item.name = key;
    item.inputs = inputs(node, flags_.at(command).at(key), where);
    out.push_back(std::move(item));
  };
  for (const auto& [raw_key, node] : root) {
    const std::string key(raw_key.str());
    if (const auto* table = node.as_table()) {
      if (key.empty() || !flags_.contains(key) || key == "config") {
        throw CLI::ConfigError(
            fmt::format("--config: [{}] is not an outbox command (the tables are "
                        "named after commands: [relay], [admin], [status], ...)",
                        key));
      }
      for (const auto& [raw_inner, inner] : *table) {
        const std::string name(raw_inner.str());
        const std::string where = fmt::format("--config: [{}] {}", key, name);
        if (inner.is_table()) throw CLI::ConfigError(where + ": a table inside a command's table");
        if (!has(key, name)) {
          throw CLI::ConfigError(where + ": `outbox " + key + "` has no flag --" + name +
                                 " (see outbox " + key + " --help)");
        }
        secret = secret || holds_secret(name, inner);
        if (key == chosen) add({key}, name, inner, where);
      }
      continue;
    }
    const std::string where = "--config: " + key;
    secret = secret || holds_secret(key, node);
    if (key == "config") throw CLI::ConfigError(where + ": a config file cannot name another");
    if (has("", key)) {
      add({}, key, node, where);
    } else if (takes_shared && has(chosen, key)) {
      add({chosen}, key, node, where);
    } else {
      bool anywhere = false;
      for (const auto& [command, names] : flags_) anywhere = anywhere || names.contains(key);
      if (!anywhere) {
        throw CLI::ConfigError(where + ": no outbox command has a flag --" + key);
      }
      // A shared setting (db, schema, ...) that this command does not take, or one of the
      // commands that start servers of their own (demo, bench: a db there would point them at
      // the production database): left alone. Their own table still applies.
    }
  }
  if (secret && source_ != nullptr && source_->open_to_others) {
    std::cerr << "outbox: warning: config file " << source_->path
              << " holds a secret (a database password or a secret Kafka property) and can be "
                 "read by other users; chmod 600 it (or move the secret to --db-password-file / "
                 "--kafka-properties-file)\n";
  }
  return out;
}

namespace {

FlagValue flag_value(const CLI::Option& option) {
  if (option.get_expected_max() == 0) return FlagValue::boolean;  // a flag: takes no value
  if (option.get_items_expected_max() > 1) return FlagValue::texts;
  const std::string type = option.get_type_name();
  if (type.starts_with("INT") || type.starts_with("UINT")) return FlagValue::integer;
  return FlagValue::text;
}

}  // namespace

void add_config_option(CLI::App& app) {
  TomlConfig::Flags flags;
  const auto names = [](const CLI::App& command) {
    std::map<std::string, FlagValue> out;
    for (const CLI::Option* option : command.get_options()) {
      const std::string name = option->get_single_name();
      if (!name.empty() && name != "help" && name != "config") out[name] = flag_value(*option);
    }
    return out;
  };
  flags[""] = names(app);
  for (const CLI::App* command : app.get_subcommands({})) {
    flags[command->get_name()] = names(*command);
  }
  // The file is read (with the one bounded reader) when the flag is parsed, so a FIFO, a
  // device or a directory is refused before CLI11 opens it; from_config() parses what was read.
  auto source = std::make_shared<ConfigSource>();
  app.set_config("--config", "",
                 "read settings from this TOML file (flags and OUTBOX_* "
                 "environment variables override it; docs/OPERATIONS.md)")
      ->check(CLI::Validator(
          [source](std::string& path) -> std::string {
            try {
              const SettingsFile file = read_settings_file(path, "file");
              source->path = path;
              source->content = file.content;
              source->open_to_others = file.open_to_others();
              source->read = true;
              return {};
            } catch (const Error& e) {
              return e.what();
            }
          },
          ""))
      ->trigger_on_parse();
  app.config_formatter(std::make_shared<TomlConfig>(std::move(flags), app, source));
}

}  // namespace outbox::cli
