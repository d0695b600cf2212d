/*
 * mlsl_train: a data- and model-parallel training loop written only against Intel MLSL's
 * documented C++ API (mlsl.hpp), as programs for MLSL were written. It builds unchanged against
 * nodecomm's mlsl.hpp and runs with -lmlsl under nodecomm-launch (docs/MLSL.md):
 *
 *   c++ -std=c++98 -I<prefix>/include mlsl_train.cpp -L<prefix>/lib -lmlsl -o mlsl_train
 *   nodecomm-launch --nodes 2 --ranks-per-node 2 -- ./mlsl_train 2 1
 *
 *   mlsl_train MODEL_PARTS [DIST_UPDATE] [USER_BUF] [USE_TEST]
 *   mlsl_train all        (every MODEL_PARTS that divides P x DIST_UPDATE x USER_BUF, in turn)
 *
 * Two convolution-like layers (OT_CC) on a (P / MODEL_PARTS) x MODEL_PARTS distribution, a
 * global minibatch of 16, 2 epochs of 3 minibatches: forward, backward in two steps, update.
 * Every exchanged value is checked: a layer's output feature map split by model arrives at the
 * next layer summed over the model group; gradients of parameters arrive summed over the data
 * group; parameters after the increment are what their owners wrote. DIST_UPDATE=1 updates
 * parameters by owned parts (reduce-scatter + allgather); USER_BUF=1 uses malloc'd buffers
 * instead of the library's; USE_TEST=1 polls TestGradientComm instead of WaitGradientComm.
 * Exits 1 on any mismatch; otherwise every rank prints "[rank] exited normally".
 *
 * C++98 and only <mlsl.hpp> plus the standard library, so that it proves the header builds as
 * MLSL's programs build it.
 */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mlsl.hpp>
#include <vector>

using namespace MLSL;

namespace {

const size_t kGlobalMinibatch = 16;
const size_t kEpochs = 2;
const size_t kMinibatchesPerEpoch = 3;
const size_t kLayerCount = 2;
const size_t kMaxReports = 5;

/* MLSL's usual example has 128 -> 256 -> 256 feature maps of 12 x 12 and 3 x 3 kernels; half
 * the maps here, so that a run takes about a second on 4 processes of a 2-core machine. */
struct LayerShape {
  size_t ifm, ofm, fmSide, kernelSide;
};
const LayerShape kShapes[kLayerCount] = {{64, 128, 12, 3}, {128, 128, 12, 3}};

size_t processIdx = 0;
size_t processCount = 1;
size_t modelParts = 1;
bool distUpdate = false;
bool userBuf = false;
bool useTest = false;
size_t failures = 0;
size_t step = 0; /* minibatches done, 1-based while one runs: part of every value */

void Report(const char* what, size_t layer, size_t idx, double expected, double got) {
  if (failures < kMaxReports)
    std::printf("[%lu] layer %lu: %s: element %lu: expected %.1f got %.1f (step %lu)\n",
                (unsigned long)processIdx, (unsigned long)layer, what, (unsigned long)idx, expected,
                got, (unsigned long)step);
  ++failures;
}

void* AllocBuf(size_t bytes) {
  if (bytes == 0) bytes = 1;
  return userBuf ? std::malloc(bytes) : Environment::GetEnv().Alloc(bytes, 64);
}

void FreeBuf(void* p) {
  if (userBuf)
    std::free(p);
  else
    Environment::GetEnv().Free(p);
}

class Layer {
 public:
  Layer(size_t idx, Session* session, Distribution* dist, Layer* prev);
  ~Layer();
  float* Params() { return param; }
  size_t ParamCount() { return paramCount; }
  void CheckParams(const char* when);
  void Forward();
  void Backward1();
  void Backward2();
  void Update();
  void EndOfEpoch();

 private:
  void Pack(Activation* act, float* comm, const float* local);
  void Unpack(Activation* act, const float* comm, float* local);
  void ReceiveOutputGradient();
  /* The value an element of the layer's full output (or input) has: its index in the global
   * minibatch x feature maps x space array, plus the step. */
  size_t FullIndex(size_t mb, size_t fm, size_t space, size_t fmCount, size_t fmSize) {
    return ((op->GetGlobalMinibatchOffset() + mb) * fmCount + fm) * fmSize + space;
  }

  size_t idx;
  Operation* op;
  ParameterSet* ps;
  std::vector<float> ownInput, ownInputGrad; /* first layer only: nobody feeds it */
  float* inputAct;
  float* inputActGrad;
  float* outputAct;     /* the next layer's input buffer (shared, as MLSL's programs do) */
  float* outputActGrad; /* and its gradient */
  std::vector<float> lastOutput, lastOutputGrad; /* last layer only */
  float* userCommIn;
  float* userCommOut;
  float* param;
  float* paramGrad;
  size_t paramCount;
  size_t paramVersion; /* the step whose update the parameters hold */
  bool backwardUnpacked;
};

Layer::Layer(size_t layerIdx, Session* session, Distribution* dist, Layer* prev)
    : idx(layerIdx),
      op(NULL),
      ps(NULL),
      inputAct(NULL),
      inputActGrad(NULL),
      outputAct(NULL),
      outputActGrad(NULL),
      userCommIn(NULL),
      userCommOut(NULL),
      param(NULL),
      paramGrad(NULL),
      paramCount(0),
      paramVersion(0),
      backwardUnpacked(false) {
  const LayerShape& s = kShapes[idx];
  OperationRegInfo* info = session->CreateOperationRegInfo(OT_CC);
  char name[32];
  std::sprintf(name, "conv%lu", (unsigned long)idx);
  info->SetName(name);
  info->AddInput(s.ifm, s.fmSide * s.fmSide, DT_FLOAT);
  info->AddOutput(s.ofm, s.fmSide * s.fmSide, DT_FLOAT);
  info->AddParameterSet(s.ifm * s.ofm, s.kernelSide * s.kernelSide, DT_FLOAT, distUpdate);
  size_t opIdx = session->AddOperation(info, dist);
  session->DeleteOperationRegInfo(info);
  op = session->GetOperation(opIdx);
  ps = op->GetParameterSet(0);

  Activation* in = op->GetInput(0);
  size_t inCount = in->GetLocalFmCount() * op->GetLocalMinibatchSize() * in->GetFmSize();
  if (prev == NULL) {
    ownInput.resize(inCount + 1);
    ownInputGrad.resize(inCount + 1);
    inputAct = &ownInput[0];
    inputActGrad = &ownInputGrad[0];
  } else {
    /* One buffer for the previous layer's output and this layer's input, big enough for both. */
    Activation* prevOut = prev->op->GetOutput(0);
    size_t prevCount =
        prevOut->GetLocalFmCount() * prev->op->GetLocalMinibatchSize() * prevOut->GetFmSize();
    if (prevCount > inCount) inCount = prevCount;
    inputAct = new float[inCount];
    inputActGrad = new float[inCount];
    prev->outputAct = inputAct;
    prev->outputActGrad = inputActGrad;
    op->SetPrev(prev->op, 0, 0);
  }

  paramCount = ps->GetLocalKernelCount() * ps->GetKernelSize();
  param = static_cast<float*>(AllocBuf(paramCount * sizeof(float)));
  paramGrad = static_cast<float*>(AllocBuf(paramCount * sizeof(float)));
  if (param == NULL || paramGrad == NULL) {
    std::printf("[%lu] cannot allocate parameter buffers\n", (unsigned long)processIdx);
    std::exit(1);
  }
  /* Global rank 0 initialises; main broadcasts it to everyone. */
  for (size_t i = 0; i < paramCount; ++i) param[i] = processIdx == 0 ? (float)i : -1.0f;
}

Layer::~Layer() {
  if (ownInput.empty()) {
    delete[] inputAct;
    delete[] inputActGrad;
  }
  std::free(userCommIn);
  std::free(userCommOut);
  FreeBuf(param);
  FreeBuf(paramGrad);
}

void Layer::Pack(Activation* act, float* comm, const float* local) {
  size_t localFm = act->GetLocalFmCount();
  for (size_t b = 0; b < act->GetPackBlockCount(); ++b) {
    CommBlockInfo* blk = act->GetPackBlock(b);
    size_t fmSize = blk->GetFmSize();
    float* dst = comm + blk->GetBufOffset();
    for (size_t mb = 0; mb < blk->GetMbCount(); ++mb)
      for (size_t fm = 0; fm < blk->GetFmCount(); ++fm)
        for (size_t sp = 0; sp < fmSize; ++sp)
          dst[(mb * blk->GetFmCount() + fm) * fmSize + sp] =
              local[((mb + blk->GetMbOffset()) * localFm + fm + blk->GetFmOffset()) * fmSize + sp];
  }
}

void Layer::Unpack(Activation* act, const float* comm, float* local) {
  size_t localFm = act->GetLocalFmCount();
  for (size_t b = 0; b < act->GetUnpackBlockCount(); ++b) {
    CommBlockInfo* blk = act->GetUnpackBlock(b);
    size_t fmSize = blk->GetFmSize();
    const float* src = comm + blk->GetBufOffset();
    for (size_t mb = 0; mb < blk->GetMbCount(); ++mb)
      for (size_t fm = 0; fm < blk->GetFmCount(); ++fm)
        for (size_t sp = 0; sp < fmSize; ++sp)
          local[((mb + blk->GetMbOffset()) * localFm + fm + blk->GetFmOffset()) * fmSize + sp] =
              src[(mb * blk->GetFmCount() + fm) * fmSize + sp];
  }
}

void Layer::CheckParams(const char* when) {
  for (size_t i = 0; i < paramCount; ++i) {
    double expected = (double)(i + paramVersion);
    if (param[i] != expected) Report(when, idx, i, expected, param[i]);
  }
}

/* Receive the input (and the increment of the parameters), compute, send the output. */
void Layer::Forward() {
  Activation* in = op->GetInput(0);
  float* comm = static_cast<float*>(in->WaitComm());
  if (comm != NULL) Unpack(in, comm, inputAct);
  ps->WaitIncrementComm();
  CheckParams("parameters in forward");

  Activation* out = op->GetOutput(0);
  size_t mbCount = op->GetLocalMinibatchSize();
  if (idx == 0) {
    /* Every member of a model group writes the same full output: the next layer must see it
     * summed over the group, i.e. multiplied by the model parts. */
    size_t fmCount = out->GetLocalFmCount(), fmSize = out->GetFmSize();
    for (size_t mb = 0; mb < mbCount; ++mb)
      for (size_t fm = 0; fm < fmCount; ++fm)
        for (size_t sp = 0; sp < fmSize; ++sp)
          outputAct[(mb * fmCount + fm) * fmSize + sp] =
              (float)(FullIndex(mb, out->GetGlobalFmOffset() + fm, sp, out->GetGlobalFmCount(),
                                fmSize) +
                      step);
  } else {
    size_t fmCount = in->GetLocalFmCount(), fmSize = in->GetFmSize();
    size_t groupSize = op->GetDistribution()->GetProcessCount(GT_MODEL);
    for (size_t mb = 0; mb < mbCount; ++mb)
      for (size_t fm = 0; fm < fmCount; ++fm)
        for (size_t sp = 0; sp < fmSize; ++sp) {
          size_t i = (mb * fmCount + fm) * fmSize + sp;
          double expected =
              (double)groupSize * (double)(FullIndex(mb, in->GetGlobalFmOffset() + fm, sp,
                                                     in->GetGlobalFmCount(), fmSize) +
                                           step);
          if (inputAct[i] != expected) Report("input activation", idx, i, expected, inputAct[i]);
        }
    /* The last layer's output goes nowhere; compute stands in as a copy of the step. */
    if (lastOutput.empty()) {
      size_t outCount = out->GetLocalFmCount() * mbCount * out->GetFmSize();
      lastOutput.resize(outCount + 1);
      lastOutputGrad.resize(outCount + 1);
      outputAct = &lastOutput[0];
      outputActGrad = &lastOutputGrad[0];
    }
    for (size_t i = 0; i < lastOutput.size(); ++i) outputAct[i] = (float)step;
  }

  float* outComm = static_cast<float*>(out->GetCommBuf());
  if (userBuf && out->GetCommBufSize() > 0) {
    if (userCommOut == NULL) userCommOut = static_cast<float*>(std::malloc(out->GetCommBufSize()));
    outComm = userCommOut;
  }
  Pack(out, outComm, outputAct);
  out->StartComm(outComm);
  backwardUnpacked = false;
}

void Layer::ReceiveOutputGradient() {
  if (backwardUnpacked) return;
  Activation* out = op->GetOutput(0);
  float* comm = static_cast<float*>(out->WaitComm());
  if (comm != NULL) Unpack(out, comm, outputActGrad);
  backwardUnpacked = true;
}

/* The gradient with respect to the input: computed and sent first, so that the previous layer
 * can go on while this one computes its parameters' gradient. */
void Layer::Backward1() {
  ReceiveOutputGradient();
  Activation* in = op->GetInput(0);
  size_t mbCount = op->GetLocalMinibatchSize();
  if (idx == 0) {
    Activation* out = op->GetOutput(0);
    size_t fmCount = out->GetLocalFmCount(), fmSize = out->GetFmSize();
    for (size_t mb = 0; mb < mbCount; ++mb)
      for (size_t fm = 0; fm < fmCount; ++fm)
        for (size_t sp = 0; sp < fmSize; ++sp) {
          size_t i = (mb * fmCount + fm) * fmSize + sp;
          double expected = (double)(FullIndex(mb, out->GetGlobalFmOffset() + fm, sp,
                                               out->GetGlobalFmCount(), fmSize) +
                                     step);
          if (outputActGrad[i] != expected)
            Report("gradient of the output", idx, i, expected, outputActGrad[i]);
        }
  } else {
    size_t fmCount = in->GetLocalFmCount(), fmSize = in->GetFmSize();
    for (size_t mb = 0; mb < mbCount; ++mb)
      for (size_t fm = 0; fm < fmCount; ++fm)
        for (size_t sp = 0; sp < fmSize; ++sp)
          inputActGrad[(mb * fmCount + fm) * fmSize + sp] =
              (float)(FullIndex(mb, in->GetGlobalFmOffset() + fm, sp, in->GetGlobalFmCount(),
                                fmSize) +
                      step);
  }
  float* inComm = static_cast<float*>(in->GetCommBuf());
  if (userBuf && in->GetCommBufSize() > 0) {
    if (userCommIn == NULL) userCommIn = static_cast<float*>(std::malloc(in->GetCommBufSize()));
    inComm = userCommIn;
  }
  Pack(in, inComm, inputActGrad);
  in->StartComm(inComm);
}

/* The gradient with respect to the parameters, then its exchange over the data group. */
void Layer::Backward2() {
  ReceiveOutputGradient();
  for (size_t i = 0; i < paramCount; ++i) paramGrad[i] = (float)(i + step);
  ps->StartGradientComm(paramGrad);
}

/* The summed gradient of the owned part; the owned parameters updated and sent to the rest of
 * the data group. */
void Layer::Update() {
  float* comm = NULL;
  if (useTest) {
    bool done = false;
    while (!done) comm = static_cast<float*>(ps->TestGradientComm(&done));
  } else {
    comm = static_cast<float*>(ps->WaitGradientComm());
  }
  const float* grad = comm != NULL ? comm : paramGrad;
  size_t ownedOffset = ps->GetOwnedKernelOffset() * ps->GetKernelSize();
  size_t ownedCount = ps->GetOwnedKernelCount() * ps->GetKernelSize();
  size_t dataParts = op->GetDistribution()->GetProcessCount(GT_DATA);
  for (size_t i = 0; i < ownedCount; ++i) {
    double expected = (double)dataParts * (double)(ownedOffset + i + step);
    if (grad[i] != expected) Report("reduced parameter gradient", idx, i, expected, grad[i]);
  }
  for (size_t i = 0; i < ownedCount; ++i) param[ownedOffset + i] = (float)(ownedOffset + i + step);
  paramVersion = step;
  ps->StartIncrementComm(param);
}

void Layer::EndOfEpoch() {
  ps->WaitIncrementComm();
  CheckParams("parameters at the end of the epoch");
}

/* One training run on a (P / modelParts) x modelParts distribution with the current settings;
 * returns the number of mismatches it found. */
size_t Train(Environment& env) {
  const size_t failuresBefore = failures;
  step = 0;
  if (processIdx == 0)
    std::printf(
        "mlsl_train: %lu processes as %lu x %lu (data x model), distributed update %d, "
        "user buffers %d, test %d\n",
        (unsigned long)processCount, (unsigned long)(processCount / modelParts),
        (unsigned long)modelParts, (int)distUpdate, (int)userBuf, (int)useTest);

  Session* session = env.CreateSession(PT_TRAIN);
  session->SetGlobalMinibatchSize(kGlobalMinibatch);
  Distribution* dist = env.CreateDistribution(processCount / modelParts, modelParts);

  Layer* layers[kLayerCount];
  for (size_t l = 0; l < kLayerCount; ++l) {
    layers[l] = new Layer(l, session, dist, l == 0 ? NULL : layers[l - 1]);
    /* Everyone starts from rank 0's parameters. */
    env.Wait(dist->Bcast(layers[l]->Params(), layers[l]->ParamCount(), DT_FLOAT, 0, GT_GLOBAL));
    layers[l]->CheckParams("parameters after the broadcast");
  }
  session->Commit();

  Statistics* stats = session->GetStats();
  stats->Start();
  for (size_t epoch = 0; epoch < kEpochs; ++epoch) {
    for (size_t mb = 0; mb < kMinibatchesPerEpoch; ++mb) {
      ++step;
      for (size_t l = 0; l < kLayerCount; ++l) layers[l]->Forward();
      for (size_t l = kLayerCount; l-- > 0;) {
        layers[l]->Backward1();
        layers[l]->Backward2();
      }
      for (size_t l = 0; l < kLayerCount; ++l) layers[l]->Update();
    }
    /* The increments of the last minibatch land before the epoch ends. */
    for (size_t l = 0; l < kLayerCount; ++l) layers[l]->EndOfEpoch();
  }
  stats->Stop();
  if (stats->IsEnabled()) {
    std::printf("[%lu] communication: %lu bytes, %.0f cycles; compute %.0f cycles\n",
                (unsigned long)processIdx, (unsigned long)stats->GetTotalCommSize(),
                (double)stats->GetTotalCommCycles(), (double)stats->GetTotalComputeCycles());
    stats->Print();
  }

  for (size_t l = 0; l < kLayerCount; ++l) delete layers[l];
  env.DeleteSession(session);
  env.DeleteDistribution(dist);
  return failures - failuresBefore;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::printf("usage: mlsl_train MODEL_PARTS|all [DIST_UPDATE] [USER_BUF] [USE_TEST]\n");
    return 1;
  }
  int version = Environment::GetVersion();
  if (MLSL_MAJOR(version) != MLSL_MAJOR_VERSION) {
    std::printf("built for MLSL API %d.%d, the library implements %d.%d\n", MLSL_MAJOR_VERSION,
                MLSL_MINOR_VERSION, MLSL_MAJOR(version), MLSL_MINOR(version));
    return 1;
  }

  Environment& env = Environment::GetEnv();
  env.Init(&argc, &argv);
  processIdx = env.GetProcessIdx();
  processCount = env.GetProcessCount();
  if (processIdx == 0)
    std::printf("mlsl_train: MLSL API %d.%d\n", MLSL_MAJOR(version), MLSL_MINOR(version));

  if (std::strcmp(argv[1], "all") == 0) {
    /* Every model-part count that divides the processes, with and without distributed update,
     * library and user buffers; waits, and once polls. */
    for (modelParts = 1; modelParts <= processCount; modelParts *= 2) {
      if (processCount % modelParts != 0) continue;
      for (int du = 0; du < 2; ++du) {
        for (int ub = 0; ub < 2; ++ub) {
          distUpdate = du != 0;
          userBuf = ub != 0;
          useTest = false;
          Train(env);
        }
      }
    }
    modelParts = processCount % 2 == 0 ? 2 : 1;
    distUpdate = true;
    userBuf = false;
    useTest = true;
    Train(env);
  } else {
    modelParts = (size_t)std::atoi(argv[1]);
    if (argc > 2) distUpdate = std::atoi(argv[2]) != 0;
    if (argc > 3) userBuf = std::atoi(argv[3]) != 0;
    if (argc > 4) useTest = std::atoi(argv[4]) != 0;
    if (modelParts < 1 || processCount % modelParts != 0) {
      std::printf("[%lu] MODEL_PARTS %lu does not divide %lu processes\n",
                  (unsigned long)processIdx, (unsigned long)modelParts,
                  (unsigned long)processCount);
      env.Finalize();
      return 1;
    }
    Train(env);
  }
  env.Finalize();

  if (failures != 0) {
    std::printf("[%lu] FAILED: %lu mismatches\n", (unsigned long)processIdx,
                (unsigned long)failures);
    return 1;
  }
  std::printf("[%lu] exited normally\n", (unsigned long)processIdx);
  return 0;
}
