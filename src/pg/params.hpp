#pragma once
// A statement's parameters, typed as the caller has them, in text as libpq sends them:
//   pg::exec(conn, sql, pg::Params().text(slot).integer(limit).boolean(touched).pointers());
// instead of std::to_string locals and lists of c_str(). The pointers stay valid while the Params
// lives (a std::deque never moves what it holds) and, for array(), while the ArrayLiteral does
// (its text is not copied: arrays of payloads can be large).

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "pg/array_literal.hpp"

namespace outbox::pg {

class Params {
 public:
  Params& text(std::string_view value) { return own(std::string(value)); }
  Params& integer(std::int64_t value) { return own(std::to_string(value)); }
  Params& boolean(bool value) { return own(value ? "true" : "false"); }
  Params& null() {
    pointers_.push_back(nullptr);
    return *this;
  }
  Params& array(ArrayLiteral& array) {
    pointers_.push_back(array.text().c_str());
    return *this;
  }

  // As pg::exec takes them: nullptr for null().
  [[nodiscard]] const std::vector<const char*>& pointers() const { return pointers_; }

 private:
  Params& own(std::string value) {
    owned_.push_back(std::move(value));
    pointers_.push_back(owned_.back().c_str());
    return *this;
  }
  std::deque<std::string> owned_;
  std::vector<const char*> pointers_;
};

}  // namespace outbox::pg
