#include "config_file.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <sstream>
#include <toml++/toml.h>


namespace outbox::cli {
namespace {

// A key whose environment variable, when set, wins over the file (flags win over both).
const std::map<std::string, std::string> kEnvironmentFirst = {
    {"db", "OUTBOX_DATABASE_URL"},
    {"db-password-file", "OUTBOX_DATABASE_PASSWORD_FILE"},
    {"log-format", "OUTBOX_LOG_FORMAT"},
};

// Commands that start throwaway servers unless told otherwise: top-level keys never reach them.
const std::set<std::string> kOwnServers = {"demo", "bench", "postgres", "kafka-mock"};

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
  throw CLI::ConfigError(where + ": a string, number or boolean is expected here");
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
    throw CLI::ConfigError(fmt::format("--config: not TOML at {}: {}", where.str(),
                                  std::string(error.description())));
  }
  // The command this run executes, as the parser found it (a flag value that happens to be a
  // command's name cannot fool it).
  std::string chosen;
  for (const CLI::App* command : app_->get_subcommands()) chosen = command->get_name();
  const bool takes_shared = !kOwnServers.contains(chosen);
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
        throw CLI::ConfigError(fmt::format("--config: [{}] is not an outbox command (the tables are "
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
        if (key == chosen) add({key}, name, inner, where);
      }
      continue;
    }
    const std::string where = "--config: " + key;
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
  return out;
}

void add_config_option(CLI::App& app) {
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
  for (const CLI::App* command : app.get_subcommands({})) {
    flags[command->get_name()] = names(*command);
  }
  app.set_config("--config", "", "read settings from this TOML file (flags and OUTBOX_* "
                                  "environment variables override it; docs/OPERATIONS.md)");
  app.config_formatter(std::make_shared<TomlConfig>(std::move(flags), app));
}

}  // namespace outbox::cli
