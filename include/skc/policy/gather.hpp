// skc/policy/gather.hpp: the gather policies of one node. The concept, SingleRank and the shared
// pieces are in gather_core.hpp; LocalFsGather, for the ranks of a node sharing a base directory, in
// local_fs_gather.hpp. Ranks on several nodes: skc::MpiGather (ext/mpi.hpp).
#pragma once

#include "gather_core.hpp"
#include "local_fs_gather.hpp"
