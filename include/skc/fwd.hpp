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
enum class CacheMode : unsigned char;
struct PartDifference;
struct MissExplanation;
struct ExportReport;
struct ImportReport;

struct CompileRequest;
struct CompileResult;
struct ProgressLine;
class ProcessInvoker;

struct InstallOptions;
class Installation;
struct InstalledPackage;
class RunPackageInstaller;
class NoInstall;

struct ReselectContext;
struct NoReselect;

struct GatherRequest;
struct GatheredSet;
struct SingleRank;
struct LocalRanks;
class LocalFsGather;

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
struct CompilerSettings;
/// Policies by position or by name (with_gather<...>, ...): compiler.hpp, "named configurations".
template <class Invoker, class... Policies>
class StaticKernelCompiler;
template <class P>
struct with_storage;
template <class P>
struct with_lock;
template <class P>
struct with_install;
template <class P>
struct with_reselect;
template <class P>
struct with_gather;
template <class P>
struct with_support;
template <class P>
struct with_targets;
template <class P>
struct with_remote;

struct RemoteConfig;
struct RemoteLease;
struct RemoteRecord;
struct RemoteRead;
struct RemoteVerifyReport;
class RemoteTier;
struct NoRemote;

}  // namespace skc
