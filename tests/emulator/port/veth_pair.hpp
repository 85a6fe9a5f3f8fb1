// A veth pair the test creates (root namespace, names unique per process) and always deletes again.
#pragma once

#include <string>

namespace uroce::emulator::port::test {

class VethPair {
 public:
  // Creates urt<pid><tag>a / urt<pid><tag>b with the given MTU, both up. Throws if `ip` fails.
  VethPair(const std::string& tag, unsigned mtu);
  ~VethPair();  // deletes the pair (deleting one end deletes both)
  VethPair(const VethPair&) = delete;
  VethPair& operator=(const VethPair&) = delete;

  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  std::string a_, b_;
};

// Whether the test can create interfaces and open packet sockets (root and the `ip` tool).
bool can_create_interfaces();

}  // namespace uroce::emulator::port::test
