// skc/fwd.hpp: forward declarations of the public types, for headers that only name them.
// Templates whose parameters are constrained (OpRecorder, IndexCache, OpDesc, FunctionInvoker) and the
// types of the optional extensions (ext/) are declared in their own headers only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace skc {

class Error;
struct ErrorContext;
enum class Errc;

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

class OpSet;

enum class LogLevel : unsigned char;
struct Options;

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

enum class LockMode : unsigned char;
class FileLock;
class ProcessLock;
class NoLock;

struct ObjectInfo;
class FilesystemStorage;
class MemoryStorage;

struct CacheKey;
struct KeyInputs;
struct CacheEntry;
struct CacheStats;
struct CacheLimits;
struct CacheConfig;
enum class CacheResult : unsigned char;
struct PruneReport;
struct VerifyReport;
struct CacheLockNames;
class NoCache;

struct KeyOp;
template <class Guard>
struct CacheHit;
template <class Guard>
struct CacheOutcome;
enum class CacheMode : unsigned char;
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
struct CompileProgress;
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

}  // namespace skc
