// A plugin's first file: it includes the whole library, describes one operator at compile time and
// prints its digest, which must equal the digest of the same record built at run time. Built by each
// consumer project of tests/packaging against an installed skc.
#include <skc/skc.hpp>

#include <cstdio>

int main() {
    using namespace skc::desc;
    using MatMul = skc::OpDesc<"MatMulV2",
                               Inputs<Tensor<"x1", skc::DType::float32, skc::Format::ND, skc::Shape<1, 2048>>,
                                      Tensor<"x2", skc::DType::float32, skc::Format::ND, skc::Shape<2048, 512>>>,
                               Outputs<Tensor<"y", skc::DType::float32, skc::Format::ND, skc::Shape<1, 512>>>>;
    constexpr skc::Digest key = MatMul::digest;
    if (key != skc::digest(MatMul::record())) {
        std::puts("the compile-time digest differs from the run-time one");
        return 1;
    }
    std::printf("MatMulV2 %s\n", key.hex().c_str());
    return 0;
}
