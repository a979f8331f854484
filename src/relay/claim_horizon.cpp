#include "relay/claim_horizon.hpp"

#include "cdc/pgoutput.hpp"

namespace outbox::detail {

std::string ClaimHorizon::sql_text() const {
  switch (kind_) {
    case Kind::everything:
      return "infinity";
    case Kind::touched_only:
      return "-infinity";
    case Kind::before:
      break;
  }
  return cdc::format_pg_timestamp(at_);
}

}  // namespace outbox::detail
