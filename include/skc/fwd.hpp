// skc/fwd.hpp: forward declarations of every public type, for headers that only name them.
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

struct CompileRequest;
struct CompileResult;
struct ProgressLine;
class ProcessInvoker;

}  // namespace skc
