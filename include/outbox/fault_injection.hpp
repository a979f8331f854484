#pragma once
// Fault injection for tests of a program built on outbox (docs/FAULTS.md): the library's named
// fault points at its durable boundaries are disarmed unless a program arms them. The outbox
// programs call this from main() so the crash campaign can arm the relays it starts; a service
// that links liboutbox never reads the variable unless it calls it.

#include <string>

namespace outbox {

// Arms the points $OUTBOX_FAULTS names ("point=action[@N],...", src/common/fault.hpp) when set and
// not empty, and logs that it did; returns the spec armed ("" when none). Throws InvalidArgument
// for a malformed spec or an unknown point, ConfigError when fault injection is not compiled in.
// Call it from main(), never from a library: it turns a process's environment into SIGKILLs.
std::string arm_faults_from_environment();

}  // namespace outbox
