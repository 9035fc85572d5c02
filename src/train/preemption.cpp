#include "train/preemption.h"

#include <csignal>

namespace zt {

namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_preemption_signal(int sig) { g_signal = sig; }

struct sigaction g_previous_term, g_previous_usr1;

}  // namespace

PreemptionWatch::PreemptionWatch() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_preemption_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls (MPI, I/O) carry on; the loop checks at step ends
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGUSR1, &action, &g_previous_usr1);
}

PreemptionWatch::~PreemptionWatch() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
}

int PreemptionWatch::signal() const { return g_signal; }

}  // namespace zt
