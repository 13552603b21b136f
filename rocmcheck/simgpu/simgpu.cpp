// Simulated GPUs for rocmcheck: a PrivateUse1 backend whose memory is host RAM, so that every
// device path of the probes (allocator, copies between devices, streams, events, pinned host
// memory, per-GPU queues) runs through torch's real dispatcher on a machine without a GPU.
// Work is synchronous: a stream or event never waits. Kernels the device must own are below;
// every other op runs on the CPU through at::native::cpu_fallback. Faults can be planted here,
// below torch, so the probes prove they catch them (set_fault).
#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/autocast_mode.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/resize_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#ifdef _WIN32
#include <process.h>
#define getpid _getpid
#else
#include <unistd.h>
#endif

namespace {

using c10::DeviceIndex;
using c10::StreamId;
constexpr auto kType = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 16;
constexpr size_t kTotalBytes = size_t(8) << 30;  // what each simulated GPU reports as its memory

int g_count = 2;
double g_init_s = 0;
std::string& g_init_log = *new std::string();  // a file each runtime init appends its pid to ("" = none)
thread_local DeviceIndex t_device = 0;
thread_local StreamId t_stream[kMaxDevices] = {};
std::atomic<StreamId> g_next_stream{1};

// Planted faults: the tail of non-blocking host-to-device copies zeroed (1/denominator of the
// bytes, 0 = off); copies on a side stream deliver the previous copy's bytes; one device whose
// floating-point results (every op it computes, convolutions included) come out wrong (-1 = none);
// one device whose matrix products take g_slow_matmul_factor times as long (-1 = none); every copy
// between the host and a device taking g_slow_copy times as long (below 2 = off); one device whose
// memory work (copies within it and to or from another device, and every op it computes but a
// product) takes g_slow_memory_factor times as long (-1 = none).
int64_t g_tail_denominator = 0;
int64_t g_slow_copy = 0;
bool g_stale_side_stream = false;
int64_t g_wrong_device = -1;
int64_t g_slow_matmul_device = -1;
int64_t g_slow_matmul_factor = 3;
int64_t g_slow_memory_device = -1;
int64_t g_slow_memory_factor = 3;
// One device whose matrix products (mm, bmm, addmm, baddbmm, addbmm) come back with the lowest bit of one
// element flipped: in every product (rate 1) or in each with probability rate (-1 = none).
int64_t g_flip_device = -1;
double g_flip_rate = 1.0;
// One device with a stuck bit in its memory: bit g_stuck_bit of the byte at device address g_stuck_addr
// reads g_stuck_value whatever was written (-1 = none). Device addresses are the simulated GPU's own:
// each allocation is placed first-fit in [0, kTotalBytes) (SimAllocator), as a GPU's allocator places
// its blocks in the GPU's memory, so the address names one place of that memory in every process.
int64_t g_stuck_device = -1;
int64_t g_stuck_addr = 0;
int64_t g_stuck_bit = 0;
int64_t g_stuck_value = 1;
// One device whose matrix products sag under sustained load: once products have run back to back (no
// pause longer than kCoolS) for g_sag_after_s seconds, each takes g_sag_factor times as long (a GPU that
// heats up and clocks down); a pause lets it cool (-1 = none).
int64_t g_sag_device = -1;
double g_sag_after_s = 5.0;
int64_t g_sag_factor = 3;
constexpr double kCoolS = 1.0;
std::mutex& g_stale_mu = *new std::mutex();
auto& g_stale = *new std::unordered_map<StreamId, std::vector<char>>();

void lazy_init() {  // a runtime's first initialisation, as slow as ROCMCHECK_SIMGPU_INIT_S asks
  static std::once_flag once;
  std::call_once(once, [] {
    if (g_init_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(g_init_s));
    if (!g_init_log.empty()) std::ofstream(g_init_log, std::ios::app) << getpid() << "\n";  // one short append
  });
}

DeviceIndex index_of(c10::Device d) { return d.has_index() ? d.index() : t_device; }

void check_index(DeviceIndex i) {
  TORCH_CHECK(i >= 0 && i < g_count, "simgpu: device ", int(i), " is not present (", g_count, " simulated GPUs)");
}

// ---- device memory: malloc with CUDA-style statistics -------------------------------------------
struct SimAllocator final : c10::DeviceAllocator {
  std::mutex mu;
  c10::CachingDeviceAllocator::DeviceStats stats[kMaxDevices];
  std::unordered_map<void*, std::pair<size_t, DeviceIndex>> live;
  std::unordered_map<void*, size_t> address;  // each live block's device address
  std::map<size_t, size_t> placed[kMaxDevices];  // device address -> size of each live block

  size_t place(DeviceIndex d, size_t n) {  // first fit, 512-byte aligned (as cudaMalloc's blocks are)
    size_t at = 0;
    for (const auto& [start, size] : placed[d]) {
      if (start >= at + n) break;
      at = std::max(at, (start + size + 511) / 512 * 512);
    }
    placed[d][at] = n;
    return at;
  }

  void count(DeviceIndex d, size_t n, bool up) {
    auto& s = stats[d];
    for (auto* arr : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes})
      for (auto t : {0, 2}) up ? (*arr)[t].increase(n) : (*arr)[t].decrease(n);  // aggregate, large pool
    for (auto* arr : {&s.allocation, &s.segment, &s.active})
      for (auto t : {0, 2}) up ? (*arr)[t].increase(1) : (*arr)[t].decrease(1);
    up ? s.num_device_alloc++ : s.num_device_free++;
  }
  c10::DataPtr allocate(size_t n) override {
    DeviceIndex d = t_device;
    void* p = n ? c10::alloc_cpu(n) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lock(mu);
      live[p] = {n, d};
      address[p] = place(d, n);
      count(d, n, true);
    }
    return {p, p, &release, c10::Device(kType, d)};
  }
  static void release(void* p);
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
  bool initialized() override { return true; }
  void emptyCache(c10::MempoolId_t) override {}
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(DeviceIndex d) override {
    check_index(d);
    std::lock_guard<std::mutex> lock(mu);
    return stats[d];
  }
  void resetAccumulatedStats(DeviceIndex d) override {
    std::lock_guard<std::mutex> lock(mu);
    auto& s = stats[d];
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                      &s.requested_bytes})
      for (auto& stat : *arr) stat.reset_accumulated();
  }
  void resetPeakStats(DeviceIndex d) override {
    std::lock_guard<std::mutex> lock(mu);
    auto& s = stats[d];
    for (auto* arr : {&s.allocation, &s.segment, &s.active, &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                      &s.requested_bytes})
      for (auto& stat : *arr) stat.reset_peak();
  }
  std::pair<size_t, size_t> getMemoryInfo(DeviceIndex d) override {
    check_index(d);
    std::lock_guard<std::mutex> lock(mu);
    return {kTotalBytes - size_t(stats[d].reserved_bytes[0].current), kTotalBytes};
  }
  // the host byte that holds device address `at` of device `d` if the block at `base` covers it, else null
  char* byte_at(void* base, DeviceIndex d, size_t at) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(base);
    if (it == live.end() || it->second.second != d) return nullptr;
    size_t start = address[base];
    return at >= start && at < start + it->second.first ? static_cast<char*>(base) + (at - start) : nullptr;
  }
  c10::Device device_of(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(p);
    return c10::Device(kType, it == live.end() ? t_device : it->second.second);
  }
};
SimAllocator& g_alloc = *new SimAllocator();  // never destroyed: tensors may be freed during exit

void SimAllocator::release(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_alloc.mu);
    auto it = g_alloc.live.find(p);
    if (it != g_alloc.live.end()) {
      g_alloc.count(it->second.second, it->second.first, false);
      g_alloc.placed[it->second.second].erase(g_alloc.address[p]);
      g_alloc.address.erase(p);
      g_alloc.live.erase(it);
    }
  }
  c10::free_cpu(p);
}
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_alloc);

// ---- pinned host memory: CPU memory whose blocks are remembered ---------------------------------
struct PinnedAllocator final : c10::Allocator {
  std::mutex mu;
  std::map<uintptr_t, size_t> blocks;
  c10::DataPtr allocate(size_t n) override {
    void* p = c10::alloc_cpu(n ? n : 1);
    std::lock_guard<std::mutex> lock(mu);
    blocks[reinterpret_cast<uintptr_t>(p)] = n;
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  static void release(void* p);
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dst, const void* src, size_t n) const override { std::memcpy(dst, src, n); }
  bool holds(const void* ptr) {
    auto at = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mu);
    auto it = blocks.upper_bound(at);
    if (it == blocks.begin()) return false;
    --it;
    return at < it->first + std::max<size_t>(it->second, 1);
  }
};
PinnedAllocator& g_pinned = *new PinnedAllocator();

void PinnedAllocator::release(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_pinned.mu);
    g_pinned.blocks.erase(reinterpret_cast<uintptr_t>(p));
  }
  c10::free_cpu(p);
}

// ---- devices, streams and events ----------------------------------------------------------------
// The device's own clock, which its events read: the CPU time of the thread its work runs on (work
// is synchronous, on the caller's thread). A GPU's events time its own work, not the host's
// scheduling: with the wall clock, two healthy runs' speed figures (the fastest sample of the
// STREAM triad) differed by up to 2.2x on a loaded 2-core machine, with this clock by up to 24%
// (scripts/speed_noise.py). A planted slowness keeps the thread busy, as asleep its clock stands
// still; a wait for another process (a collective) is no work of the device and is not counted.
std::chrono::nanoseconds device_clock() {
#ifdef _WIN32
  return std::chrono::steady_clock::now().time_since_epoch();
#else
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
#endif
}

void busy_until(std::chrono::nanoseconds until) {
  while (device_clock() < until) {
  }
}

struct Event {
  std::chrono::nanoseconds at{0};
};

struct Guard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    auto old = getDevice();
    setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kType, t_device); }
  void setDevice(c10::Device d) const override {
    check_index(index_of(d));
    t_device = index_of(d);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { t_device = index_of(d); }
  c10::Stream getStream(c10::Device d) const override {
    auto i = index_of(d);
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, i), t_stream[i]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index_of(d)), 0);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getNewStream(d, 0); }
  c10::Stream getNewStream(c10::Device d, int) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, index_of(d)), g_next_stream++);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto old = getStream(s.device());
    t_stream[s.device_index()] = s.id();
    return old;
  }
  DeviceIndex deviceCount() const noexcept override { return static_cast<DeviceIndex>(g_count); }
  void record(void** event, const c10::Stream&, const DeviceIndex, const c10::EventFlag) const override {
    if (!*event) *event = new Event();
    static_cast<Event*>(*event)->at = device_clock();
  }
  void block(void*, const c10::Stream&) const override {}  // work is done when it is queued
  bool queryEvent(void*) const override { return true; }
  void destroyEvent(void* event, const DeviceIndex) const noexcept override { delete static_cast<Event*>(event); }
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const DeviceIndex) const override {}
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const DeviceIndex) const override {
    TORCH_CHECK(start && end, "simgpu: both events must be recorded before elapsed_time");
    auto span = static_cast<Event*>(end)->at - static_cast<Event*>(start)->at;
    return std::chrono::duration<double, std::milli>(span).count();
  }
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, Guard);

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_count > 0; }
  bool hasPrimaryContext(DeviceIndex) const override { return true; }
  void init() const override { lazy_init(); }
  DeviceIndex deviceCount() const override { return static_cast<DeviceIndex>(g_count); }
  void setCurrentDevice(DeviceIndex d) const override {
    check_index(d);
    t_device = d;
  }
  DeviceIndex getCurrentDevice() const override { return t_device; }
  DeviceIndex exchangeDevice(DeviceIndex d) const override {
    auto old = t_device;
    setCurrentDevice(d);
    return old;
  }
  DeviceIndex maybeExchangeDevice(DeviceIndex d) const override { return exchangeDevice(d); }
  bool isPinnedPtr(const void* p) const override { return g_pinned.holds(p); }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }
  c10::Device getDeviceFromPtr(void* p) const override { return g_alloc.device_of(p); }
  const at::Generator& getDefaultGenerator(DeviceIndex) const override { return at::detail::getDefaultCPUGenerator(); }
  at::Generator getNewGenerator(DeviceIndex) const override { return at::detail::createCPUGenerator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t n) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    auto fresh = g_alloc.allocate(n);
    if (impl->data() && n) std::memcpy(fresh.get(), impl->data(), std::min(n, impl->nbytes()));
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(n);
  }
};

// ---- the kernels the device owns ----------------------------------------------------------------
at::Tensor as_cpu(const at::Tensor& t) {  // the same memory, seen as a CPU tensor
  if (t.device().is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), at::TensorOptions().dtype(t.dtype()));
}

at::Tensor to_device(const at::Tensor& cpu, c10::Device device) {
  if (!cpu.defined()) return cpu;
  auto out = at::empty(cpu.sizes(), cpu.options().device(device));
  as_cpu(out).copy_(cpu);
  return out;
}

void maybe_wrong(const at::Tensor& result) {  // the planted "one device computes wrong" fault
  if (g_wrong_device < 0 || !result.defined() || result.device().type() != kType ||
      result.device().index() != g_wrong_device || result.numel() == 0 || !result.is_floating_point())
    return;
  auto first = as_cpu(result);
  while (first.dim()) first = first.select(0, 0);
  first.add_(first.abs() + 1);
}

bool is_product(const c10::OperatorHandle& op) {
  static const auto& names = *new std::set<std::string>{"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm",
                                                         "aten::addbmm", "aten::_addmm_activation",
                                                         "aten::_scaled_mm"};
  return names.count(op.schema().name()) > 0;
}

void maybe_flip(const at::Tensor& result) {  // the planted "silent one-bit error" fault: the middle element
  if (g_flip_device < 0 || !result.defined() || result.device().type() != kType ||
      result.device().index() != g_flip_device || result.numel() == 0 || !result.is_floating_point())
    return;
  if (g_flip_rate < 1.0) {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    if (std::uniform_real_distribution<double>(0.0, 1.0)(rng) >= g_flip_rate) return;
  }
  auto element = as_cpu(result);
  int64_t rest = element.numel() / 2;
  std::vector<int64_t> index(element.dim());
  for (int64_t d = element.dim() - 1; d >= 0; --d) {
    index[d] = rest % element.size(d);
    rest /= element.size(d);
  }
  for (auto i : index) element = element.select(0, i);
  auto bits = element.element_size() == 2 ? at::kShort : element.element_size() == 4 ? at::kInt : at::kLong;
  element.view(bits).bitwise_xor_(1);
}

void maybe_stuck(const at::Tensor& t) {  // the planted stuck bit, in the block `t` was written to
  if (g_stuck_device < 0 || !t.defined() || t.device().type() != kType || t.device().index() != g_stuck_device ||
      !t.has_storage() || !t.storage().data())
    return;
  char* byte = g_alloc.byte_at(t.storage().mutable_data(), t.device().index(), size_t(g_stuck_addr));
  if (!byte) return;
  char mask = char(1 << g_stuck_bit);
  *byte = g_stuck_value ? char(*byte | mask) : char(*byte & ~mask);
}

void maybe_sag(const c10::OperatorHandle& op, const at::Tensor& result, std::chrono::nanoseconds began) {
  if (g_sag_device < 0 || !is_product(op) || result.device() != c10::Device(kType, g_sag_device)) return;
  static std::mutex mu;
  static auto last = std::chrono::steady_clock::time_point();
  static auto streak = std::chrono::steady_clock::time_point();
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (now - last > std::chrono::duration<double>(kCoolS)) streak = now;  // it had cooled: a new streak
    last = now;
    if (now - streak < std::chrono::duration<double>(g_sag_after_s)) return;
  }
  busy_until(began + (device_clock() - began) * g_sag_factor);
  std::lock_guard<std::mutex> lock(mu);
  last = std::chrono::steady_clock::now();
}

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                 std::optional<c10::Device> device, std::optional<bool>, std::optional<c10::MemoryFormat> format) {
  lazy_init();  // every device tensor begins here
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, &g_alloc, c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<c10::Device> device, std::optional<bool>) {
  lazy_init();
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, &g_alloc,
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

void stale_side_stream(const at::Tensor& dst) {  // deliver the previous copy's bytes on this stream
  auto stream = t_stream[dst.device().index()];
  if (!stream || !dst.is_contiguous()) return;
  auto* bytes = static_cast<char*>(dst.data_ptr());
  size_t n = dst.nbytes();
  std::vector<char> now(bytes, bytes + n);
  std::lock_guard<std::mutex> lock(g_stale_mu);
  auto& before = g_stale[stream];
  before.resize(n, 0);
  std::memcpy(bytes, before.data(), n);
  before.swap(now);
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  c10::OptionalDeviceGuard guard(dst.device().type() == kType ? dst.device() : self.device());
  auto began = device_clock();
  as_cpu(dst).copy_(as_cpu(self));
  bool host_side = self.device().is_cpu() || dst.device().is_cpu();
  if (host_side && g_slow_copy > 1)  // the planted slow link: the copy takes g_slow_copy times as long
    busy_until(began + (device_clock() - began) * g_slow_copy);
  c10::Device slow_memory(kType, g_slow_memory_device);
  if (!host_side && g_slow_memory_device >= 0 && (self.device() == slow_memory || dst.device() == slow_memory))
    busy_until(began + (device_clock() - began) * g_slow_memory_factor);  // the planted slow memory
  bool to_device = dst.device().type() == kType && self.device().is_cpu();
  if (to_device && g_stale_side_stream) stale_side_stream(dst);
  if (to_device && non_blocking && g_tail_denominator > 0 && dst.is_contiguous() && dst.nbytes()) {
    size_t tail = std::max<size_t>(dst.nbytes() / g_tail_denominator, 1);
    std::memset(static_cast<char*>(dst.data_ptr()) + dst.nbytes() - tail, 0, tail);
  }
  maybe_stuck(dst);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

// `param.data = param.to(device)` (FSDP, DDP, Module.to): torch allows it between dense tensors
// of the devices it knows, so the device says that its tensors and the CPU's are alike.
bool compatible_shallow_copy(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.device().is_cpu() || t.device().type() == kType);
  };
  return dense(self) && dense(from);
}

void record_stream(at::Tensor&, c10::Stream) {}  // memory is freed at once: no stream to wait for

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  std::optional<at::Tensor> b = bias && bias->defined() ? std::optional<at::Tensor>(as_cpu(*bias)) : std::nullopt;
  auto out = to_device(at::convolution(as_cpu(input), as_cpu(weight), b, stride, padding, dilation, transposed,
                                       output_padding, groups), input.device());
  maybe_wrong(out);
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::IntArrayRef stride,
    c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed, c10::IntArrayRef output_padding,
    int64_t groups, std::array<bool, 3> mask) {
  std::vector<int64_t> bias_sizes{transposed ? weight.size(1) * groups : weight.size(0)};
  auto [gi, gw, gb] = at::convolution_backward(as_cpu(grad_output), as_cpu(input), as_cpu(weight), bias_sizes,
                                               stride, padding, dilation, transposed, output_padding, groups, mask);
  auto d = input.device();
  return {to_device(gi, d), to_device(gw, d), to_device(gb, d)};
}

void fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  auto began = device_clock();
  at::native::cpu_fallback(op, stack);
  if (stack->empty() || !stack->back().isTensor()) return;
  const at::Tensor& result = stack->back().toTensor();
  if (g_wrong_device >= 0) maybe_wrong(result);
  if (g_flip_device >= 0 && is_product(op)) maybe_flip(result);
  if (g_slow_matmul_device >= 0 && is_product(op) &&  // the planted "one slow GPU" fault: the events see it
      result.device() == c10::Device(kType, g_slow_matmul_device)) {
    busy_until(began + (device_clock() - began) * g_slow_matmul_factor);
  }
  if (g_slow_memory_device >= 0 && !is_product(op) && result.device() == c10::Device(kType, g_slow_memory_device))
    busy_until(began + (device_clock() - began) * g_slow_memory_factor);
  maybe_sag(op, result, began);
  maybe_stuck(result);  // an in-place op's result is the block it wrote (its copy back came through copy_from)
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("resize_", TORCH_FN(at::native::resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(at::native::set_storage_cpu_));
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_));
  m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
  m.impl("view", TORCH_FN(at::native::view));
  m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
  m.impl("record_stream", TORCH_FN(record_stream));
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(compatible_shallow_copy));
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {  // ops without a rule run as they are
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {  // what autocast lowers, and what it keeps in fp32
  KERNEL_PRIVATEUSEONE(mm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(log_softmax, int, fp32)
  KERNEL_PRIVATEUSEONE(cross_entropy_loss, fp32)
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  static Hooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  m.def("set_device_count", [](int n) { g_count = std::max(0, std::min(n, kMaxDevices)); });
  m.def("device_count", [] { return g_count; });
  m.def("current_device", [] { return int(t_device); });
  m.def("set_device", [](int i) { check_index(i); t_device = i; });
  m.def("set_init_seconds", [](double s) { g_init_s = s; });
  m.def("set_init_log", [](const std::string& path) { g_init_log = path; });
  m.def("init", [] { lazy_init(); });  // what torch.cuda._lazy_init does: properties need the runtime
  m.def("set_fault", [](const std::string& name, int64_t value) {
    if (name == "copy-tail") g_tail_denominator = value;
    else if (name == "stale-side-stream") g_stale_side_stream = value != 0;
    else if (name == "wrong-device") g_wrong_device = value;
    else if (name == "slow-matmul") g_slow_matmul_device = value;
    else if (name == "slow-copy") g_slow_copy = value;
    else if (name == "slow-matmul-factor") g_slow_matmul_factor = std::max<int64_t>(value, 1);
    else if (name == "slow-memory") g_slow_memory_device = value;
    else if (name == "slow-memory-factor") g_slow_memory_factor = std::max<int64_t>(value, 1);
    else TORCH_CHECK(false, "simgpu: no fault named ", name);
  });
  m.def("set_stuck_bit", [](int64_t device, int64_t address, int64_t bit, int64_t value) {
    TORCH_CHECK(address >= 0 && size_t(address) < kTotalBytes && bit >= 0 && bit < 8, "simgpu: no such memory bit");
    g_stuck_addr = address;
    g_stuck_bit = bit;
    g_stuck_value = value;
    g_stuck_device = device;
  });
  m.def("set_sag", [](int64_t device, double after_s, int64_t factor) {
    g_sag_after_s = after_s;
    g_sag_factor = std::max<int64_t>(factor, 1);
    g_sag_device = device;
  });
  m.def("set_bitflip", [](int64_t device, double rate) {
    g_flip_device = device;
    g_flip_rate = rate;
  });
}
