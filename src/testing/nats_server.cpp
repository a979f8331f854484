#include "outbox/testing/nats_server.hpp"

#include <stdlib.h>

#include <filesystem>

#include "outbox/error.hpp"
#include "testing/server_process.hpp"

namespace outbox {

struct NatsServer::Impl {
  std::filesystem::path dir;
  std::uint16_t port = 0;
  std::unique_ptr<detail::ServerProcess> process;
};

NatsServer::NatsServer() : impl_(std::make_unique<Impl>()) {
  const auto program =
      detail::find_program("nats-server", "OUTBOX_NATS_SERVER",
                           {"/usr/sbin/nats-server", "/usr/bin/nats-server"}, "nats-server");
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "outbox-nats-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) throw ConfigError("mkdtemp failed");
  impl_->dir = dir_template;
  impl_->port = detail::free_loopback_port();
  impl_->process = std::make_unique<detail::ServerProcess>(
      program,
      std::vector<std::string>{"-a", "127.0.0.1", "-p", std::to_string(impl_->port), "-js", "-sd",
                               (impl_->dir / "store").string()},
      impl_->dir / "nats-server.log", impl_->port);
  impl_->process->start();
}

NatsServer::~NatsServer() {
  impl_->process->stop();
  std::error_code ignored;
  std::filesystem::remove_all(impl_->dir, ignored);
}

std::string NatsServer::url() const { return "nats://127.0.0.1:" + std::to_string(impl_->port); }
std::uint16_t NatsServer::port() const { return impl_->port; }
int NatsServer::process_group() const { return impl_->process->pid(); }
std::string NatsServer::store_dir() const { return (impl_->dir / "store").string(); }
void NatsServer::stop(bool kill) { impl_->process->stop(kill); }
void NatsServer::start() { impl_->process->start(); }

}  // namespace outbox
