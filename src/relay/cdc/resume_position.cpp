#include "relay/cdc/resume_position.hpp"

namespace outbox::detail {

cdc::Lsn ResumePosition::start_from(const cdc::SystemIdentity& server) const {
  const bool same_server =
      done_ != 0 && server.system_id == system_id_ && server.timeline == timeline_;
  return same_server ? done_ : 0;
}

cdc::Lsn ResumePosition::start_from_saved(std::string_view saved) {
  if (saved.empty()) return 0;
  return cdc::parse_lsn(saved).value_or(0);
}

void ResumePosition::confirmed(const cdc::SystemIdentity& server, cdc::Lsn lsn) {
  if (lsn > done_ || server.system_id != system_id_ || server.timeline != timeline_) {
    system_id_ = server.system_id;
    timeline_ = server.timeline;
    done_ = lsn;
  }
}

bool ResumePosition::save_due(cdc::Lsn lsn, Clock::time_point now) const {
  return lsn > saved_ && now >= next_save_;
}

void ResumePosition::saved(cdc::Lsn lsn, Clock::time_point now) {
  saved_ = lsn;
  next_save_ = now + kSaveEvery;
}

}  // namespace outbox::detail
