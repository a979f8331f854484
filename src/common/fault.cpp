#include "common/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <thread>
#include <vector>

#include "common/log.hpp"
#include "outbox/error.hpp"

namespace outbox::fault {
namespace {

enum class Action { kill, stop, error, dberror, delay, exit };

struct Armed {
  std::string point;
  Action action = Action::error;
  long delay_ms = 0;
  long fire_on = 1;
  long hits = 0;
};

std::mutex& mutex() {
  static std::mutex m;
  return m;
}
std::vector<Armed>& points() {
  static std::vector<Armed> p;
  return p;
}

long parse_number(std::string_view text, const std::string& entry) {
  long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) {
    throw InvalidArgument("OUTBOX_FAULTS entry \"" + entry + "\": \"" + std::string(text) +
                          "\" is not a non-negative number");
  }
  return value;
}

Armed parse_entry(const std::string& entry) {
  const auto eq = entry.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw InvalidArgument("OUTBOX_FAULTS entry \"" + entry +
                          "\": expected point=action[@N], e.g. relay.after_claim=kill@2");
  }
  Armed armed;
  armed.point = entry.substr(0, eq);
  if (std::find(std::begin(kPoints), std::end(kPoints), armed.point) == std::end(kPoints)) {
    std::string known;
    for (const char* point : kPoints) known += (known.empty() ? "" : ", ") + std::string(point);
    throw InvalidArgument("OUTBOX_FAULTS entry \"" + entry + "\": no fault point \"" + armed.point +
                          "\"; the points are " + known);
  }
  std::string action = entry.substr(eq + 1);
  if (const auto at = action.find('@'); at != std::string::npos) {
    armed.fire_on = parse_number(std::string_view(action).substr(at + 1), entry);
    if (armed.fire_on < 1)
      throw InvalidArgument("OUTBOX_FAULTS entry \"" + entry + "\": @N starts at 1");
    action.resize(at);
  }
  if (action == "kill") {
    armed.action = Action::kill;
  } else if (action == "stop") {
    armed.action = Action::stop;
  } else if (action == "error") {
    armed.action = Action::error;
  } else if (action == "dberror") {
    armed.action = Action::dberror;
  } else if (action == "exit") {
    armed.action = Action::exit;
  } else if (action.starts_with("delay:")) {
    armed.action = Action::delay;
    armed.delay_ms = parse_number(std::string_view(action).substr(6), entry);
  } else {
    throw InvalidArgument("OUTBOX_FAULTS entry \"" + entry +
                          "\": unknown action; use kill, stop, error, dberror, exit or delay:MS");
  }
  return armed;
}

}  // namespace

std::atomic<bool> g_armed{false};  // constant-initialized: valid before any dynamic initializer

bool compiled_in() noexcept { return OUTBOX_FAULT_INJECTION != 0; }

void arm(const std::string& spec) {
  if (!compiled_in() && !spec.empty()) {
    throw ConfigError(
        "OUTBOX_FAULTS is set, but this build has no fault injection "
        "(-DOUTBOX_FAULT_INJECTION=OFF); unset it");
  }
  std::vector<Armed> parsed;
  std::size_t start = 0;
  while (start < spec.size()) {
    const auto comma = spec.find(',', start);
    const std::string entry =
        spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!entry.empty()) parsed.push_back(parse_entry(entry));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::lock_guard lock(mutex());
  points() = std::move(parsed);
  g_armed.store(!points().empty(), std::memory_order_relaxed);
}

std::string arm_from_environment() {
  const char* spec = std::getenv("OUTBOX_FAULTS");
  if (spec == nullptr || *spec == '\0') return {};
  arm(spec);
  detail::log().warn("fault injection armed from OUTBOX_FAULTS: {} (for tests only)", spec);
  return spec;
}

long hits(std::string_view point) {
  std::lock_guard lock(mutex());
  for (const Armed& armed : points()) {
    if (armed.point == point) return armed.hits;
  }
  return 0;
}

void hit(std::string_view point) {
  Action action{};
  long delay_ms = 0;
  {
    std::lock_guard lock(mutex());
    Armed* match = nullptr;
    for (Armed& armed : points()) {
      if (armed.point == point) match = &armed;
    }
    if (match == nullptr || ++match->hits != match->fire_on) return;
    action = match->action;
    delay_ms = match->delay_ms;
  }
  detail::log().warn("fault point {} fired", point);
  switch (action) {
    case Action::kill:
      ::kill(::getpid(), SIGKILL);
      break;
    case Action::stop:
      ::kill(::getpid(), SIGSTOP);
      break;
    case Action::exit:
      ::_exit(86);
    case Action::delay:
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      break;
    case Action::error:
      throw Error("injected fault at " + std::string(point), true);
    case Action::dberror:
      throw DatabaseError("injected database failure at " + std::string(point), "08006", true);
  }
}

}  // namespace outbox::fault

namespace outbox {

std::string arm_faults_from_environment() { return fault::arm_from_environment(); }

}  // namespace outbox
