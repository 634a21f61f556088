// Two translation units include every header; a non-inline definition in a header would fail to
// link, and the two units must agree on process-wide state (counters, the recording session).
#include <skc/skc.hpp>

std::uint64_t counter_from_b();
bool session_seen_from_b();

int main() {
    const std::uint64_t a = skc::next_op_info_counter();
    const std::uint64_t b = counter_from_b();
    if (b != a + 1) return 1;  // one counter per process, not one per translation unit
    skc::OpRecorder<> session;
    if (!session_seen_from_b()) return 2;
    return 0;
}
