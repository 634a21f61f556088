#include <skc/skc.hpp>

std::uint64_t counter_from_b() { return skc::next_op_info_counter(); }
bool session_seen_from_b() { return skc::recording_session_active(); }
