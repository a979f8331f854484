#include "outbox/testing/redis_server.hpp"

#include <stdlib.h>

#include <filesystem>

#include "outbox/error.hpp"
#include "testing/server_process.hpp"

namespace outbox {

struct RedisServer::Impl {
  RedisServerOptions options;
  std::filesystem::path dir;
  std::uint16_t port = 0;
  std::unique_ptr<detail::ServerProcess> process;
};

RedisServer::RedisServer(RedisServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  const auto program =
      detail::find_program("redis-server", "OUTBOX_REDIS_SERVER",
                           {"/usr/bin/redis-server", "/usr/sbin/redis-server"}, "redis-server");
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "outbox-redis-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) throw ConfigError("mkdtemp failed");
  impl_->dir = dir_template;
  impl_->port = detail::free_loopback_port();
  const bool durable = impl_->options.durable;
  std::vector<std::string> args{"--bind",
                                "127.0.0.1",
                                "--port",
                                std::to_string(impl_->port),
                                "--dir",
                                impl_->dir.string(),
                                "--daemonize",
                                "no",
                                "--save",
                                "",
                                "--appendonly",
                                durable ? "yes" : "no",
                                "--appendfsync",
                                durable ? "always" : "everysec",
                                "--logfile",
                                "",
                                "--protected-mode",
                                "no"};
  if (!impl_->options.password.empty()) {
    args.insert(args.end(), {"--requirepass", impl_->options.password});
  }
  impl_->process = std::make_unique<detail::ServerProcess>(
      program, std::move(args), impl_->dir / "redis-server.log", impl_->port,
      "Ready to accept connections");
  impl_->process->start();
}

RedisServer::~RedisServer() {
  impl_->process->stop();
  std::error_code ignored;
  std::filesystem::remove_all(impl_->dir, ignored);
}

std::string RedisServer::url() const {
  const std::string auth =
      impl_->options.password.empty() ? "" : ":" + impl_->options.password + "@";
  return "redis://" + auth + "127.0.0.1:" + std::to_string(impl_->port);
}
std::uint16_t RedisServer::port() const { return impl_->port; }
int RedisServer::process_group() const { return impl_->process->pid(); }
void RedisServer::stop(bool kill) { impl_->process->stop(kill); }
void RedisServer::start() { impl_->process->start(); }
void RedisServer::pause() { impl_->process->pause(); }
void RedisServer::resume() { impl_->process->resume(); }

}  // namespace outbox
