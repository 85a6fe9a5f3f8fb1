// A poll that finds nothing, again and again, gives the CPU away now and then.
//
// uroce's NIC is a process (uroced's engine) that needs a CPU to move every packet. On a machine with
// fewer cores than busy-polling threads (two perftest processes and the engine on two cores), an
// application spinning on an empty CQ holds a core that the engine, or its peer, needs to produce the very
// completion it waits for; the scheduler hands the core over only at the end of a slice (milliseconds).
// So after UROCE_POLL_YIELD empty polls in a row (default 64, a few microseconds; 0: never) a thread calls
// sched_yield(): the core goes to a thread that waits for it, and comes straight back if none does. A poll
// that returns completions never makes a system call; the yield is on the idle path only. The engine
// yields in the same way when it is idle (emulator/engine/back_off.hpp), so threads sharing a core hand it
// to each other as soon as they run out of work.
#pragma once

namespace uroce::shim {

// Called after each poll of a CQ (ibv_poll_cq, ibv_start_poll): `found` says whether it returned work.
void note_poll(bool found);

}  // namespace uroce::shim
