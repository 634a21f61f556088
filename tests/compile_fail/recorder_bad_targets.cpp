// An OpRecorder over a Targets policy that does not fit is named in one message, as in the host.
// expect: the Targets policy needs a member `bool is_target(std::string_view op_type) const`
#include <skc/recorder.hpp>

struct NotTargets {
    [[nodiscard]] bool supports(std::string_view) const { return true; }  // the wrong role's member
};

using Recorder = skc::OpRecorder<NotTargets>;
static_assert(sizeof(Recorder) > 0);
