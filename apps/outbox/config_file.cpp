#include "config_file.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <sstream>
#include <toml++/toml.h>

#include "outbox/error.hpp"

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

// A TOML value as the text a flag takes.
std::string scalar_text(const toml::node& node, const std::string& where) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", f->get());
  throw ConfigError(where + ": a string, number or boolean is expected here");
}

std::vector<std::string> inputs(const toml::node& node, const std::string& where) {
  std::vector<std::string> out;
  if (const auto* array = node.as_array()) {
    for (const toml::node& element : *array) out.push_back(scalar_text(element, where));
    return out;
  }
  out.push_back(scalar_text(node, where));
  return out;
}

}  // namespace

std::vector<CLI::ConfigItem> TomlConfig::from_config(std::istream& input) const {
  toml::table root;
  try {
    root = toml::parse(input);
  } catch (const toml::parse_error& error) {
    std::ostringstream where;
    where << error.source().begin;
    throw ConfigError(fmt::format("--config: not TOML at {}: {}", where.str(),
                                  std::string(error.description())));
  }
  std::vector<CLI::ConfigItem> out;
  const auto has = [&](const std::string& command, const std::string& key) {
    const auto it = flags_.find(command);
    return it != flags_.end() && it->second.contains(key);
  };
  const auto add = [&](std::vector<std::string> parents, const std::string& key,
                       const toml::node& node, const std::string& where) {
    if (environment_wins(key)) return;
    CLI::ConfigItem item;
    item.parents = std::move(parents);
    item.name = key;
    item.inputs = inputs(node, where);
    out.push_back(std::move(item));
  };
  for (const auto& [raw_key, node] : root) {
    const std::string key(raw_key.str());
    if (const auto* table = node.as_table()) {
      if (key.empty() || !flags_.contains(key) || key == "config") {
        throw ConfigError(fmt::format("--config: [{}] is not an outbox command (the tables are "
                                      "named after commands: [relay], [admin], [status], ...)",
                                      key));
      }
      for (const auto& [raw_inner, inner] : *table) {
        const std::string name(raw_inner.str());
        const std::string where = fmt::format("--config: [{}] {}", key, name);
        if (inner.is_table()) throw ConfigError(where + ": a table inside a command's table");
        if (!has(key, name)) {
          throw ConfigError(where + ": `outbox " + key + "` has no flag --" + name +
                            " (see outbox " + key + " --help)");
        }
        if (key == chosen_) add({key}, name, inner, where);
      }
      continue;
    }
    const std::string where = "--config: " + key;
    if (key == "config") throw ConfigError(where + ": a config file cannot name another");
    if (has("", key)) {
      add({}, key, node, where);
    } else if (has(chosen_, key)) {
      add({chosen_}, key, node, where);
    } else {
      bool anywhere = false;
      for (const auto& [command, names] : flags_) anywhere = anywhere || names.contains(key);
      if (!anywhere) {
        throw ConfigError(where + ": no outbox command has a flag --" + key);
      }
      // A shared setting (db, schema, ...) that this command does not take: left alone.
    }
  }
  return out;
}

void add_config_option(CLI::App& app, int argc, char** argv) {
  std::map<std::string, std::set<std::string>> flags;
  const auto names = [](const CLI::App& command) {
    std::set<std::string> out;
    for (const CLI::Option* option : command.get_options()) {
      const std::string name = option->get_single_name();
      if (!name.empty() && name != "help" && name != "config") out.insert(name);
    }
    return out;
  };
  flags[""] = names(app);
  std::string chosen;
  for (const CLI::App* command : app.get_subcommands({})) {
    flags[command->get_name()] = names(*command);
  }
  for (int i = 1; i < argc && chosen.empty(); ++i) {
    if (flags.contains(argv[i]) && std::string(argv[i]) != "") chosen = argv[i];
  }
  app.set_config("--config", "", "read settings from this TOML file (flags and OUTBOX_* "
                                  "environment variables override it; docs/OPERATIONS.md)");
  app.config_formatter(std::make_shared<TomlConfig>(std::move(flags), std::move(chosen)));
}

}  // namespace outbox::cli
