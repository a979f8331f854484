// What the CLI's subcommands share: where the database is and how to connect to it, and secrets
// from files (database passwords, Kafka properties), so that they never stand on a command line
// (where `ps` shows them to every user) nor in a log line.

#include "cli_common.hpp"

#include <fmt/format.h>
#include <libpq-fe.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>

#include "common/redact.hpp"
#include "outbox/error.hpp"
#include "pg/connection.hpp"

namespace outbox::cli {
namespace {

std::string& password_file() {
  static std::string path;
  return path;
}

std::string conninfo_quoted(const std::string& value) {
  std::string quoted = "'";
  for (const char c : value) {
    if (c == '\'' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "'";
}

// `url` (URI or keyword/value) as a keyword/value string with `password` added.
std::string with_password(const std::string& url, const std::string& password) {
  char* error = nullptr;
  const std::unique_ptr<PQconninfoOption, decltype(&PQconninfoFree)> options(
      PQconninfoParse(url.c_str(), &error), &PQconninfoFree);
  if (!options) {
    std::string why = error != nullptr ? error : "out of memory";
    if (error != nullptr) PQfreemem(error);
    while (!why.empty() && why.back() == '\n') why.pop_back();
    throw ConfigError("--db " + detail::redact_connection_string(url) + ": " +
                      detail::scrub(why, detail::connection_secrets(url)));
  }
  std::string out;
  for (const PQconninfoOption* option = options.get(); option->keyword != nullptr; ++option) {
    if (option->val == nullptr || *option->val == '\0') continue;
    if (std::strcmp(option->keyword, "password") == 0) {
      throw ConfigError("--db " + detail::redact_connection_string(url) +
                        " has a password and a password file is given too; keep only the file");
    }
    out += std::string(option->keyword) + "=" + conninfo_quoted(option->val) + " ";
  }
  return out + "password=" + conninfo_quoted(password);
}

}  // namespace

void set_database_password_file(const std::string& path) { password_file() = path; }

std::string database_url(const std::string& flag) {
  std::string url = flag;
  if (url.empty()) {
    if (const char* env = std::getenv("OUTBOX_DATABASE_URL")) url = env;
  }
  std::string file = password_file();
  if (file.empty()) {
    if (const char* env = std::getenv("OUTBOX_DATABASE_PASSWORD_FILE")) file = env;
  }
  if (file.empty()) return url;
  return with_password(url, read_secret_file(file, "database password"));
}

pg::Connection open_cli_connection(const std::string& db_flag, std::string_view application_name) {
  auto connection = pg::Connection::open(database_url(db_flag), application_name);
  pg::exec(connection.get(), fmt::format("SET lock_timeout = {}", kCliLockTimeout.count()));
  pg::exec(connection.get(),
           fmt::format("SET statement_timeout = {}", kCliStatementTimeout.count()));
  return connection;
}

std::string read_secret_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(what + " file " + path + ": cannot read it (" + std::strerror(errno) + ")");
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && (info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    std::cerr << "outbox: warning: " << what << " file " << path
              << " can be read by other users; chmod 600 it\n";
  }
  std::string line;
  std::getline(in, line);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (line.empty()) throw ConfigError(what + " file " + path + " is empty");
  return line;
}

std::map<std::string, std::string> read_properties_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError("Kafka properties file " + path + ": cannot read it (" +
                      std::strerror(errno) + ")");
  }
  read_secret_file(path, "Kafka properties");  // the permission warning; content read below
  std::map<std::string, std::string> properties;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    const auto eq = line.find('=', start);
    if (eq == std::string::npos || eq == start) {
      throw ConfigError("Kafka properties file " + path + ", line " + std::to_string(number) +
                        ": expected key=value");
    }
    std::string key = line.substr(start, eq - start);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    properties[key] = line.substr(eq + 1);
  }
  return properties;
}

}  // namespace outbox::cli
