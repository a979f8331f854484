#include "outbox/testing/rabbitmq_server.hpp"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "outbox/error.hpp"
#include "rabbitmq/amqp_common.hpp"
#include "testing/server_process.hpp"

namespace outbox {

struct RabbitMqServer::Impl {
  std::filesystem::path dir;
  std::uint16_t port = 0;
  std::unique_ptr<detail::ServerProcess> process;
};

namespace {

// The node's settings, all inside `dir`: Debian's script otherwise reads /etc/rabbitmq and
// /var/lib/rabbitmq, and runs as the rabbitmq user when started through /usr/sbin.
std::vector<std::string> node_environment(const std::filesystem::path& dir, std::uint16_t port,
                                          std::uint16_t dist_port) {
  const std::string d = dir.string();
  return {"HOME=" + d,
          "RABBITMQ_NODENAME=outbox-" + std::to_string(port) + "@localhost",
          "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
          "RABBITMQ_NODE_PORT=" + std::to_string(port),
          "RABBITMQ_DIST_PORT=" + std::to_string(dist_port),
          "RABBITMQ_MNESIA_BASE=" + d + "/mnesia",
          "RABBITMQ_LOG_BASE=" + d + "/log",
          "RABBITMQ_LOGS=-",
          "RABBITMQ_PID_FILE=" + d + "/pid",
          "RABBITMQ_ENABLED_PLUGINS_FILE=" + d + "/enabled_plugins",
          "RABBITMQ_CONFIG_FILE=" + d + "/rabbitmq",
          "RABBITMQ_ADVANCED_CONFIG_FILE=" + d + "/advanced.config",
          "RABBITMQ_CONF_ENV_FILE=" + d + "/rabbitmq-env.conf"};
}

}  // namespace

RabbitMqServer::RabbitMqServer() : impl_(std::make_unique<Impl>()) {
  const auto script =
      detail::find_program("rabbitmq-server", "OUTBOX_RABBITMQ_SERVER",
                           {"/usr/lib/rabbitmq/bin/rabbitmq-server"}, "rabbitmq-server");
  std::string dir_template =
      (std::filesystem::temp_directory_path() / "outbox-rabbitmq-XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) throw ConfigError("mkdtemp failed");
  impl_->dir = dir_template;
  std::ofstream(impl_->dir / "enabled_plugins") << "[].\n";
  std::ofstream(impl_->dir / "rabbitmq.conf") << "loopback_users = none\n";
  std::ofstream(impl_->dir / "rabbitmq-env.conf");
  impl_->port = detail::free_loopback_port();
  std::vector<std::string> args =
      node_environment(impl_->dir, impl_->port, detail::free_loopback_port());
  args.push_back(script.string());
  // Through env(1): the script takes its settings from the environment only. ServerProcess
  // signals the whole process group, the script and the Erlang node under it.
  impl_->process = std::make_unique<detail::ServerProcess>("/usr/bin/env", std::move(args),
                                                           impl_->dir / "rabbitmq.log", impl_->port,
                                                           "Server startup complete");
  impl_->process->start(std::chrono::seconds(90));
}

RabbitMqServer::~RabbitMqServer() {
  impl_->process->stop();
  std::error_code ignored;
  std::filesystem::remove_all(impl_->dir, ignored);
}

std::string RabbitMqServer::url() const {
  return "amqp://guest:guest@127.0.0.1:" + std::to_string(impl_->port) + "/";
}
std::uint16_t RabbitMqServer::port() const { return impl_->port; }
int RabbitMqServer::process_group() const { return impl_->process->pid(); }
void RabbitMqServer::declare_queue(const std::string& exchange, const std::string& queue,
                                   const std::string& binding, bool classic) const {
  rabbitmq::Connection connection(rabbitmq::parse_url(url()), "outbox-testing",
                                  std::chrono::seconds(5), std::chrono::seconds(0));
  amqp_connection_state_t state = connection.get();
  const amqp_channel_t channel = rabbitmq::Connection::kChannel;
  amqp_exchange_declare(state, channel, rabbitmq::bytes(exchange), rabbitmq::bytes("topic"), 0, 1,
                        0, 0, amqp_empty_table);
  connection.check(amqp_get_rpc_reply(state), "cannot declare exchange " + exchange);
  rabbitmq::Table arguments;
  if (!classic) {
    arguments.add_text("x-queue-type", "quorum");
    arguments.add_bool("x-single-active-consumer", true);
  }
  amqp_queue_declare(state, channel, rabbitmq::bytes(queue), 0, 1, 0, 0, arguments.get());
  connection.check(amqp_get_rpc_reply(state), "cannot declare queue " + queue);
  amqp_queue_bind(state, channel, rabbitmq::bytes(queue), rabbitmq::bytes(exchange),
                  rabbitmq::bytes(binding), amqp_empty_table);
  connection.check(amqp_get_rpc_reply(state), "cannot bind queue " + queue);
}

void RabbitMqServer::stop(bool kill) { impl_->process->stop(kill); }
void RabbitMqServer::pause() { impl_->process->pause(); }
void RabbitMqServer::resume() { impl_->process->resume(); }
void RabbitMqServer::start() { impl_->process->start(std::chrono::seconds(90)); }

}  // namespace outbox
