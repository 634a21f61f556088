// skc/fwd.hpp: forward declarations of every public type, and the public templates with their
// default arguments (the defining headers include this one and do not repeat them), for headers that
// only name them. Declared in their own headers only: OpDesc (its parameters are values of class
// types that must be complete), FunctionInvoker and LockTraits (constrained: a concept check must
// stay a plain `false` for them), and the types of the optional extensions (ext/).
#pragma once

#include <cstddef>
#include <cstdint>

namespace skc {

class Error;
struct ErrorContext;
enum class Errc;

enum class Kind : unsigned char;

struct Digest;
struct DigestHash;

template <std::size_t Words>
class BasicCallKey;
template <class T, std::size_t Words>
class CallMap;

class Value;
struct Member;

enum class DType : unsigned char;
enum class Format : unsigned char;
template <std::int64_t... Dims>
struct Shape;
class RuntimeShape;

enum class ParamType : unsigned char;
struct TensorDesc;
struct Attr;
struct PlatformInfo;
struct OpRecord;
template <std::size_t N>
struct FixedString;
struct DefaultContext;

struct ReadLimits;
struct WriteOptions;
struct LoadedOp;
struct DirReadResult;
enum class OnBadFile;

class OpSet;

enum class LogLevel : unsigned char;
struct Options;

enum class Access : unsigned char;
class Layout;
class RunLayout;

struct DefaultTargets;
struct DefaultSupport;
class OpTypeList;
class CompiledSet;
struct SelectOptions;
struct Decision;
enum class Verdict : unsigned char;
struct Selection;

struct RecordingResult;
template <class Targets = DefaultTargets, class Support = DefaultSupport>
class OpRecorder;

enum class LockMode : unsigned char;
enum class LockAccess : unsigned char;
class FileLock;
class ProcessLock;
class NoLock;

struct ObjectInfo;
class FilesystemStorage;
class MemoryStorage;
struct LogMark;
struct LogTail;
template <class S>
struct StorageTraits;

struct CacheKey;
struct KeyInputs;
struct CacheEntry;
struct CacheStats;
struct CachePart;
struct CompositeEntry;
struct CacheLimits;
struct StoredLimits;
enum class LimitSource : unsigned char;
struct EffectiveLimits;
struct CacheConfig;
enum class CacheResult : unsigned char;
struct PruneReport;
struct BadEntry;
struct VerifyReport;
struct CacheLockNames;
template <class S = FilesystemStorage, class L = FileLock>
class IndexCache;
class NoCache;

struct KeyOp;
template <class Guard>
struct CacheHit;
template <class Guard>
struct CacheOutcome;
template <class Guard>
struct CacheCover;
enum class CacheMode : unsigned char;
struct PartDifference;
struct MissExplanation;
struct ExportReport;
struct ImportReport;

struct CompileRequest;
struct CompileResult;
struct ProgressLine;
class ProcessInvoker;
template <class I>
struct InvokerTraits;

struct InstallOptions;
struct InstallRequest;
class Installation;
struct InstalledPackage;
class RunPackageInstaller;
class NoInstall;
template <class I>
struct InstallerTraits;

struct ReselectContext;
struct NoReselect;

struct GatherRequest;
struct GatheredSet;
struct SingleRank;
struct LocalRanks;
class LocalFsGather;
class AnyGather;

struct SelectedOp;
struct RecordedOp;
struct SessionPlan;
class FileWriter;
struct ToValueOptions;
template <class Kernel>
class KernelTable;

struct CompilerCheck;
enum class MemoAccess : unsigned char;
struct CompileProgress;
enum class CompileOutcome : unsigned char;
struct CompileReport;
struct FailedOp;
class KnownFailures;
struct CompilerSettings;
/// The roles of a StaticKernelCompiler's policies, in the order they are given by position. The one
/// list of them: the selectors below, the defaults and the checks (policies.hpp) and the host's member
/// types follow it.
enum class PolicyRole : unsigned char { storage, lock, install, reselect, gather, support, targets, remote };
/// Policies by position or by name (with_gather<...>, ...): policies.hpp.
template <class Invoker, class... Policies>
class StaticKernelCompiler;
template <PolicyRole Role, class P>
struct with_policy;
template <class P>
using with_storage = with_policy<PolicyRole::storage, P>;
template <class P>
using with_lock = with_policy<PolicyRole::lock, P>;
template <class P>
using with_install = with_policy<PolicyRole::install, P>;
template <class P>
using with_reselect = with_policy<PolicyRole::reselect, P>;
template <class P>
using with_gather = with_policy<PolicyRole::gather, P>;
template <class P>
using with_support = with_policy<PolicyRole::support, P>;
template <class P>
using with_targets = with_policy<PolicyRole::targets, P>;
template <class P>
using with_remote = with_policy<PolicyRole::remote, P>;

struct RemoteConfig;
struct RemoteLease;
struct RemoteRecord;
struct RemoteRead;
struct RemoteVerifyReport;
class RemoteTier;
struct NoRemote;

}  // namespace skc
