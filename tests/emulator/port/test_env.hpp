// What the tests share: the process's one EAL (started by main.cpp before any test runs).
#pragma once

#include "emulator/port/eal.hpp"

namespace uroce::emulator::port::test {
Eal& eal();
}
