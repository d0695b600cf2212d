/*
 * mlsl.hpp: the C++ API of Intel MLSL 1.0, implemented by nodecomm's libmlsl.
 *
 * A program written against MLSL's documented API compiles against this header and links
 * with -lmlsl; libmlsl runs every exchange through the node's nodecommd (docs/MLSL.md). The
 * names, signatures, enumerator values and default arguments are MLSL's public interface; the
 * text of this file is nodecomm's. It compiles as C++98 and later and needs nothing from
 * nodecomm's own headers.
 *
 * Every object is created by the library (Environment::CreateSession, CreateDistribution,
 * Session::AddOperation, ...); the classes have no data members and no virtual functions.
 * Misuse is reported as MLSL reports it: a message on stderr naming the rank and the call,
 * then the process exits with status 1.
 */
#ifndef MLSL_HPP
#define MLSL_HPP

#include <cstddef>

#define MLSL_MAJOR_VERSION 1
#define MLSL_MINOR_VERSION 0

#define MLSL_VERSION(major, minor) ((major << 16) | (minor))
#define MLSL_MAJOR(version) (version >> 16)
#define MLSL_MINOR(version) (version & 0xFFFF)

/* v1 >= v2 */
#define MLSL_VERSION_GE(v1, v2)                                           \
  ((MLSL_MAJOR(v1) > MLSL_MAJOR(v2)) ||                                   \
   (MLSL_MAJOR(v1) == MLSL_MAJOR(v2) && MLSL_MINOR(v1) == MLSL_MINOR(v2)) || \
   (MLSL_MAJOR(v1) == MLSL_MAJOR(v2) && MLSL_MINOR(v1) > MLSL_MINOR(v2)))

/* v1 < v2 */
#define MLSL_VERSION_LT(v1, v2)         \
  ((MLSL_MAJOR(v1) < MLSL_MAJOR(v2)) || \
   (MLSL_MAJOR(v1) == MLSL_MAJOR(v2) && MLSL_MINOR(v1) < MLSL_MINOR(v2)))

/* Only the library creates and destroys the API's objects. */
#define NO_EXPLICIT_CREATION(ClassName)     \
 protected:                                 \
  ClassName() {}                            \
  ~ClassName() {}                           \
                                            \
 private:                                   \
  ClassName(const ClassName&);              \
  ClassName& operator=(const ClassName&);

#if defined(__GNUC__)
#pragma GCC visibility push(default)
/* MLSL's Statistics return unsigned long long, which C++98 lacks (-pedantic warns). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wlong-long"
#endif

namespace MLSL {

/* A request of a Distribution collective: an opaque token, valid until Environment::Wait (or a
 * Test that reports completion) consumes it. */
typedef int CommReq;

enum DataType { DT_FLOAT = 0, DT_DOUBLE = 1, DT_BYTE = 2 };

enum PhaseType { PT_TRAIN = 0, PT_TEST = 1 };

/* GT_DATA: the processes that hold the same parameters for different minibatch slices
 * (gradients are summed over it). GT_MODEL: the processes that hold different parameters for
 * the same minibatch slice (activations cross it). GT_GLOBAL: every process. */
enum GroupType { GT_DATA = 0, GT_MODEL = 1, GT_GLOBAL = 2 };

enum ReductionType { RT_SUM = 0, RT_MIN = 1, RT_MAX = 2 };

/* How an operation's outputs relate to its inputs: only OT_CC (a cross-correlation, i.e. a
 * convolution or fully connected layer) produces partial sums under model parallelism. */
enum OpType {
  OT_CC = 0,
  OT_BIAS = 1,
  OT_ACT = 2,
  OT_POOL = 3,
  OT_SPLIT = 4,
  OT_CONCAT = 5,
  OT_BCAST = 6,
  OT_REDUCE = 7,
  OT_DATA = 8,
  OT_EVAL = 9
};

enum CompressionType { CT_NONE = 0, CT_QUANTIZATION = 1 };

/* MLSL's description of an external quantization library. nodecomm keeps a copy but does not
 * load the library: CT_QUANTIZATION selects the daemon's built-in wire compression instead
 * (NODECOMM_MLSL_QUANT, docs/MLSL.md). */
typedef struct {
  char* lib_path;
  char* quant_buffer_func_name;
  char* dequant_buffer_func_name;
  char* reduce_sum_func_name;
  size_t block_size;
  size_t elem_in_block;
} QuantParams;

/* One block to copy between a local activation tile and a communication buffer. Offsets and
 * counts are relative to the local tile (minibatch rows x local feature maps x feature map
 * size); GetBufOffset is in DataType elements from the start of the buffer. */
class CommBlockInfo {
  NO_EXPLICIT_CREATION(CommBlockInfo)

 public:
  size_t GetMbOffset();
  size_t GetMbCount();
  size_t GetFmOffset();
  size_t GetFmCount();
  size_t GetFmSize();
  DataType GetDataType();
  size_t GetBufOffset();
};

/* An operation's input or output: its feature-map slice on this process and the exchange
 * with the peer operation set by Operation::SetPrev/SetNext. */
class Activation {
  NO_EXPLICIT_CREATION(Activation)

 public:
  size_t GetGlobalFmCount();
  size_t GetGlobalFmOffset();
  size_t GetLocalFmCount();
  size_t GetPackBlockCount();
  size_t GetUnpackBlockCount();
  CommBlockInfo* GetPackBlock(size_t idx);
  CommBlockInfo* GetUnpackBlock(size_t idx);
  DataType GetDataType();
  size_t GetFmSize();
  /* A library buffer of GetCommBufSize() bytes to pack into (NULL when there is nothing to
   * send). Any buffer of that size may be passed to StartComm instead. */
  void* GetCommBuf();
  size_t GetCommBufSize();
  /* Starts sending the packed blocks. */
  void StartComm(void* buf);
  /* Waits for the peer's exchange that brings data to this activation; returns the buffer to
   * unpack from, or NULL when no exchange is needed or none was started. */
  void* WaitComm();
};

/* A set of learnable parameters (weights or biases) and its gradient exchange over the data
 * group: an allreduce, or with distributed update a reduce-scatter of the gradients and an
 * allgather of the updated parameters. */
class ParameterSet {
  NO_EXPLICIT_CREATION(ParameterSet)

 public:
  size_t GetGlobalKernelCount();
  size_t GetGlobalKernelOffset();
  size_t GetLocalKernelCount();
  size_t GetOwnedKernelCount();
  size_t GetOwnedKernelOffset();
  DataType GetDataType();
  size_t GetKernelSize();
  bool IsDistributedUpdate();
  void StartGradientComm(void* buf);
  void StartIncrementComm(void* buf);
  /* The summed gradients (the owned part with distributed update), or NULL when there is no
   * exchange or none is pending. */
  void* WaitGradientComm();
  void* TestGradientComm(bool* isCompleted);
  void* WaitIncrementComm();
};

/* A data x model layout of the processes and collectives over its groups. */
class Distribution {
  NO_EXPLICIT_CREATION(Distribution)

 public:
  size_t GetProcessIdx(GroupType groupType);
  size_t GetProcessCount(GroupType groupType);

  CommReq* Bcast(void* buffer, size_t count, DataType dataType, size_t rootIdx,
                 GroupType groupType);
  CommReq* Reduce(void* sendBuffer, void* recvBuffer, size_t count, DataType dataType,
                  ReductionType redType, size_t rootIdx, GroupType groupType);
  CommReq* AllReduce(void* sendBuffer, void* recvBuffer, size_t count, DataType dataType,
                     ReductionType redType, GroupType groupType);
  /* sendCount elements go to each process of the group. */
  CommReq* AlltoAll(void* sendBuffer, size_t sendCount, void* recvBuffer, DataType dataType,
                    GroupType groupType);
  /* Counts and offsets in elements, one per process of the group. */
  CommReq* AlltoAllv(void* sendBuffer, size_t* sendCounts, size_t* sendOffsets, void* recvBuffer,
                     size_t* recvCounts, size_t* recvOffsets, DataType dataType,
                     GroupType groupType);
  CommReq* Gather(void* sendBuffer, size_t sendCount, void* recvBuffer, DataType dataType,
                  size_t rootIdx, GroupType groupType);
  CommReq* AllGather(void* sendBuffer, size_t sendCount, void* recvBuffer, DataType dataType,
                     GroupType groupType);
  /* Blocks are packed in group order: block i starts at the sum of recvCounts[0..i). */
  CommReq* AllGatherv(void* sendBuffer, size_t sendCount, void* recvBuffer, size_t* recvCounts,
                      DataType dataType, GroupType groupType);
  CommReq* Scatter(void* sendBuffer, void* recvBuffer, size_t recvCount, DataType dataType,
                   size_t rootIdx, GroupType groupType);
  CommReq* ReduceScatter(void* sendBuffer, void* recvBuffer, size_t recvCount, DataType dataType,
                         ReductionType redType, GroupType groupType);
  void Barrier(GroupType groupType);
};

/* What an operation registers before Session::AddOperation: its activations' and parameter
 * sets' shapes. */
class OperationRegInfo {
  NO_EXPLICIT_CREATION(OperationRegInfo)

 public:
  void SetName(const char* name);
  size_t AddInput(size_t featureMapCount, size_t featureMapSize, DataType dataType);
  size_t AddOutput(size_t featureMapCount, size_t featureMapSize, DataType dataType);
  size_t AddParameterSet(size_t kernelCount, size_t kernelSize, DataType dataType,
                         bool distributedUpdate = false, CompressionType compressType = CT_NONE);
  void Validate(Distribution* dist = NULL);
};

class Session;

/* One layer of the model: its distribution, activations and parameter sets. */
class Operation {
  NO_EXPLICIT_CREATION(Operation)

 public:
  void SetDistribution(Distribution* dist);
  Distribution* GetDistribution();
  Session* GetSession();
  OpType GetOpType();
  void SetPrev(Operation* prev, size_t actIdx, size_t prevOpActIdx);
  void SetNext(Operation* next, size_t actIdx, size_t nextOpActIdx);
  const char* GetName();
  size_t GetGlobalMinibatchSize();
  size_t GetLocalMinibatchSize();
  size_t GetGlobalMinibatchOffset();
  size_t GetInputCount();
  Activation* GetInput(size_t idx);
  size_t GetOutputCount();
  Activation* GetOutput(size_t idx);
  bool HasParameterSets();
  size_t GetParameterSetCount();
  ParameterSet* GetParameterSet(size_t idx);
};

/* Communication and compute time per operation, collected when MLSL_STATS=1. Cycles are the
 * CPU's time-stamp counter. */
class Statistics {
  NO_EXPLICIT_CREATION(Statistics)

 public:
  void Start();
  void Stop();
  void Reset();
  bool IsStarted();
  bool IsEnabled();
  void Print();
  unsigned long long GetIsolationCommCycles(size_t opIdx);
  size_t GetCommSize(size_t opIdx);
  unsigned long long GetCommCycles(size_t opIdx);
  unsigned long long GetComputeCycles(size_t opIdx);
  unsigned long long GetTotalIsolationCommCycles();
  size_t GetTotalCommSize();
  unsigned long long GetTotalCommCycles();
  unsigned long long GetTotalComputeCycles();
};

/* The operations of one model that share a global minibatch size. */
class Session {
  NO_EXPLICIT_CREATION(Session)

 public:
  void SetGlobalMinibatchSize(size_t globalMinibatchSize);
  size_t GetGlobalMinibatchSize();
  PhaseType GetPhaseType();
  OperationRegInfo* CreateOperationRegInfo(OpType opType);
  void DeleteOperationRegInfo(OperationRegInfo* info);
  size_t AddOperation(OperationRegInfo* info, Distribution* dist = NULL);
  void RemoveOperations();
  size_t GetOperationCount();
  Operation* GetOperation(size_t idx);
  /* After every operation is added and linked: plans the exchanges, allocates buffers. */
  void Commit();
  Statistics* GetStats();
};

/* The library itself (one per process). */
class Environment {
  NO_EXPLICIT_CREATION(Environment)

 public:
  static Environment& GetEnv();
  static int GetVersion();
  /* "color=<int>" splits the global group: processes with equal colors form one. */
  void Configure(const char* config = NULL);
  void Init(int* argc, char** argv[]);
  void Finalize();
  bool IsInitialized();
  size_t GetProcessIdx();
  size_t GetProcessCount();
  Session* CreateSession(PhaseType phaseType = PT_TRAIN);
  void DeleteSession(Session* session);
  Distribution* CreateDistribution(size_t dataPartitions, size_t modelPartitions);
  Distribution* CreateDistributionWithColors(int dataColor, int modelColor);
  void DeleteDistribution(Distribution* distribution);
  void Wait(CommReq* req);
  void Test(CommReq* req, bool* isCompleted);
  /* Memory in the node's shared arena, so exchanges on it need no copy. */
  void* Alloc(size_t size, size_t alignment);
  void Free(void* ptr);
  void SetQuantizationParams(QuantParams* params);
  QuantParams* GetQuantizationParams();
};

} /* namespace MLSL */

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#pragma GCC visibility pop
#endif

#endif /* MLSL_HPP */
