#include "train/stop_signals.h"

#include <unistd.h>

#include <csignal>

namespace zt {

namespace {

volatile std::sig_atomic_t g_preemption = 0, g_interrupts = 0, g_announce = 0;

extern "C" void on_preemption_signal(int sig) { g_preemption = sig; }

// Only async-signal-safe calls here: write(2) and _exit(2).
extern "C" void on_interrupt(int sig) {
  static const char kFirst[] = "\nzerotrain: interrupted: finishing this step and saving a checkpoint "
                               "(interrupt again to exit at once without saving)\n";
  static const char kSecond[] = "\nzerotrain: interrupted again: exiting now, without saving\n";
  if (g_interrupts > 0) {
    if (g_announce) (void)!::write(STDERR_FILENO, kSecond, sizeof(kSecond) - 1);
    ::_exit(130);
  }
  g_interrupts = sig;
  if (g_announce) (void)!::write(STDERR_FILENO, kFirst, sizeof(kFirst) - 1);
}

struct sigaction g_previous_term, g_previous_usr1, g_previous_int, g_previous_usr2;

void install(int sig, void (*handler)(int), struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls (MPI, I/O) carry on; the loop checks at step ends
  sigaction(sig, &action, previous);
}

}  // namespace

StopSignals::StopSignals(bool announce) {
  g_preemption = 0;
  g_interrupts = 0;
  g_announce = announce ? 1 : 0;
  install(SIGTERM, on_preemption_signal, &g_previous_term);
  install(SIGUSR1, on_preemption_signal, &g_previous_usr1);
  install(SIGINT, on_interrupt, &g_previous_int);
  install(SIGUSR2, on_interrupt, &g_previous_usr2);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGUSR1, &g_previous_usr1, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
  sigaction(SIGUSR2, &g_previous_usr2, nullptr);
}

int StopSignals::preemption() const { return g_preemption; }

int StopSignals::interrupted() const { return g_interrupts; }

}  // namespace zt
