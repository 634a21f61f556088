// A stand-in for a file system without working flock (NFS without lockd, Lustre without -o flock):
// preloaded (LD_PRELOAD) into a process, every flock() fails with the errno in SKC_TEST_FLOCK_ERRNO
// (ENOLCK when unset).
#include <cerrno>
#include <cstdlib>

extern "C" int flock(int, int) {
    const char* e = std::getenv("SKC_TEST_FLOCK_ERRNO");
    errno = e != nullptr ? std::atoi(e) : ENOLCK;
    return -1;
}
