#pragma once
// Consumer-side schema evolution: an event's payload written at schema_version v is brought to
// the version the consumer's effect is written for by the steps registered for its event type
// (v → v+1 → …), before the effect runs. An event of a version newer than the consumer knows is
// parked (kind 'unknown_version'), not applied: deploy a consumer that knows it, then release it
// with `outbox inbox release` (docs/CONSUMING.md, "Evolving schemas").

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "outbox/consumed_event.hpp"
#include "outbox/schema.hpp"  // PGconn

namespace outbox {

class Upcasters {
 public:
  // One step: the payload of version `from` (JSON text) as version from + 1. It may throw; the
  // event is then not applied (the consumer retries, and parks it after park_failing_after).
  using Step = std::function<std::string(std::string_view payload)>;

  // Registers the step of `event_type` from version `from` (≥ 1). The consumer's version of the
  // type becomes the highest step's from + 1, unless current() set it. Throws InvalidArgument for
  // an empty type, a version below 1, an empty step, or a step registered twice.
  Upcasters& add(const std::string& event_type, std::int32_t from, Step step);
  // A step written in SQL: `function` (schema-qualified or not, letters, digits and '_') takes the
  // payload as jsonb and returns it as the next version's, run on the inbox's connection inside
  // its transaction (`outbox consume --upcast TYPE:FROM=FUNCTION`). Throws InvalidArgument as
  // add(), and for a name that is no function name.
  Upcasters& add_sql(const std::string& event_type, std::int32_t from, std::string function);
  // The version the effect is written for (events at it pass unchanged; newer ones are parked).
  // Without it, and without steps, an event type's versions are not checked.
  Upcasters& current(const std::string& event_type, std::int32_t version);

  // The consumer's version of `event_type`; nullopt: not checked.
  [[nodiscard]] std::optional<std::int32_t> current_version(const std::string& event_type) const;

  // Why `event` cannot be brought to the consumer's version ("" when it can): newer than the
  // consumer knows, or a step missing between its version and the consumer's.
  [[nodiscard]] std::string unknown(const ConsumedEvent& event) const;

  // Brings `event` to the consumer's version in place (payload and schema_version). SQL steps run
  // on `conn` (InvalidArgument without one). Throws InvalidArgument when unknown() is not empty;
  // what a step throws propagates.
  void upcast(ConsumedEvent& event, PGconn* conn = nullptr) const;

  [[nodiscard]] bool empty() const noexcept { return steps_.empty() && current_.empty(); }

 private:
  Upcasters& put(const std::string& event_type, std::int32_t from, Step step, std::string sql);
  struct Entry {
    Step step;        // a C++ step, or
    std::string sql;  // the SQL function of one
  };
  std::map<std::pair<std::string, std::int32_t>, Entry> steps_;
  std::map<std::string, std::int32_t> current_;
};

}  // namespace outbox
