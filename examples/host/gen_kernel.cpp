// gen_kernel: prints the shape-specialised host kernel of each op info file given, or why it is
// skipped (on stderr). Usage: gen_kernel <op_info.json>... ; exit status 2 when any op is skipped.
#include <cstdio>
#include <exception>
#include <string>

#include <skc/op_info_io.hpp>

#include "codegen.hpp"

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s <op_info.json>...\n", argv[0]);
        return 1;
    }
    int rc = 0;
    for (int i = 1; i < argc; ++i) {
        try {
            const skc::OpRecord op = skc::read_op_info(argv[i]);
            const std::string symbol = "skc_host_kernel_" + std::to_string(i);
            if (const auto src = skc_host::generate_kernel(op, symbol)) {
                std::fputs(src->c_str(), stdout);
            } else {
                std::fprintf(stderr, "skipped %s: %s\n", argv[i], skc_host::unsupported_reason(op).c_str());
                rc = 2;
            }
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s: %s\n", argv[i], e.what());
            return 1;
        }
    }
    return rc;
}
