// gloo_latency.cc - Gloo all-reduce (float32 sum, in place) of small sizes over TCP
// loopback, for perf/compare's latency rows (../shared/peers' driver starts at 4 KiB).
//
// Build: g++ -O2 -std=c++17 -o gloo_latency perf/gloo_latency.cc -lgloo -lpthread
// Run:   one process per rank (perf/compare starts them):
//        gloo_latency RANK NRANKS STORE_DIR [target_s=0.2] [bytes,bytes,...=8] [algo=chunked]
//        algo: chunked (AllreduceRingChunked), ring (AllreduceRing), new_ring (gloo::allreduce)
//
// Rendezvous and timing as ../shared/peers/gloo_allreduce_bench.cc: FileStore, full mesh
// on 127.0.0.1; per size 1 untimed call, 2 timed for an estimate (max over ranks),
// iters = clamp(target_s / est, 10, 1000000), barrier, timed loop, time = max over
// ranks / iters; then rank r fills r + (i % 7) and every element must be
// n(n-1)/2 + n(i % 7). Output (rank 0), the driver's columns:
//   algo bytes time_us algbw_GBps busbw_GBps iters check
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/socket.h>

#include "gloo/allreduce.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_all.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"

static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static double allmax(const std::shared_ptr<gloo::Context>& ctx, double v) {
  std::vector<double*> p{&v};
  gloo::AllreduceRing<double> ar(ctx, p, 1, gloo::ReductionFunction<double>::max);
  ar.run();
  return v;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s RANK NRANKS STORE_DIR [target_s] [bytes,...] [algo]\n", argv[0]);
    return 1;
  }
  const int rank = atoi(argv[1]), n = atoi(argv[2]);
  double target = argc > 4 ? atof(argv[4]) : 0.2;
  if (target <= 0) target = 0.2;
  const std::string list = argc > 5 ? argv[5] : "8";
  const std::string algo = argc > 6 ? argv[6] : "chunked";
  if (algo != "chunked" && algo != "ring" && algo != "new_ring") {
    fprintf(stderr, "unknown algo %s\n", algo.c_str());
    return 1;
  }

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  attr.ai_family = AF_INET;
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore fileStore(argv[3]);
  gloo::rendezvous::PrefixStore store("lat", fileStore);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  ctx->setTimeout(std::chrono::seconds(120));
  ctx->connectFullMesh(store, dev);

  if (rank == 0) {
    printf("# gloo_latency ranks=%d target_s=%.2f float32 sum in-place tcp 127.0.0.1\n", n, target);
    printf("%-10s %12s %12s %12s %12s %8s %6s\n", "algo", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "iters",
           "check");
    fflush(stdout);
  }
  int allok = 1;
  uint32_t tag = 1;
  for (size_t pos = 0; pos < list.size();) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    size_t cnt = strtoull(list.substr(pos, comma - pos).c_str(), nullptr, 10) / sizeof(float);
    pos = comma + 1;
    if (cnt < 1) continue;
    std::vector<float> buf(cnt, 0.0f);
    std::vector<float*> ptrs{buf.data()};
    std::unique_ptr<gloo::Algorithm> old;
    if (algo == "chunked") old.reset(new gloo::AllreduceRingChunked<float>(ctx, ptrs, (int)cnt));
    if (algo == "ring") old.reset(new gloo::AllreduceRing<float>(ctx, ptrs, (int)cnt));
    const uint32_t mytag = tag++;
    auto run = [&]() {
      if (old) {
        old->run();
        return;
      }
      gloo::AllreduceOptions opts(ctx);
      opts.setOutput(buf.data(), cnt);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      void (*fn)(void*, const void*, const void*, size_t) = &gloo::sum<float>;
      opts.setReduceFunction(fn);
      opts.setTag(mytag);
      gloo::allreduce(opts);
    };
    gloo::BarrierAllToAll barrier(ctx);

    run();
    barrier.run();
    double t0 = now();
    run();
    run();
    double est = allmax(ctx, (now() - t0) / 2);
    long iters = (long)(target / (est > 1e-9 ? est : 1e-9));
    if (iters < 10) iters = 10;
    if (iters > 1000000) iters = 1000000;
    barrier.run();
    t0 = now();
    for (long it = 0; it < iters; it++) run();
    double el = allmax(ctx, now() - t0);

    for (size_t i = 0; i < cnt; i++) buf[i] = (float)(rank + (int)(i % 7));
    run();
    int ok = 1;
    for (size_t i = 0; i < cnt; i++)
      if (buf[i] != (float)(n * (n - 1) / 2 + n * (int)(i % 7))) ok = 0;
    ok = allmax(ctx, ok ? 0.0 : 1.0) == 0.0;
    allok &= ok;

    double t = el / iters, alg = (double)(cnt * sizeof(float)) / t / 1e9;
    if (rank == 0) {
      printf("%-10s %12zu %12.2f %12.4f %12.4f %8ld %6s\n", algo.c_str(), cnt * sizeof(float), t * 1e6, alg,
             alg * 2.0 * (n - 1) / n, iters, ok ? "OK" : "FAIL");
      fflush(stdout);
    }
  }
  return allok ? 0 : 2;
}
