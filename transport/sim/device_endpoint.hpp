// A transport::Device as a simulation node. Header-only: the simulation code itself never calls the
// Device, so it can be tested with fakes while the transport changes.
//
//   sim::NodeId a = net.add_node({.addresses = {ip_a}});
//   transport::Device dev_a(net.sink(a));
//   sim::DeviceEndpoint ep_a(dev_a);
//   net.set_endpoint(a, ep_a);
#pragma once

#include "transport/device.hpp"
#include "transport/sim/endpoint.hpp"

namespace uroce::sim {

class DeviceEndpoint final : public Endpoint {
 public:
  explicit DeviceEndpoint(transport::Device& device) : device_(device) {}

  // Flow rules first, as a NIC's flow tables come before its RoCE engine (raw packet QPs).
  void receive(std::span<const uint8_t> frame, Nanos now) override {
    if (!device_.steer(frame, now)) device_.receive(frame, now);
  }
  void run(Nanos now) override { device_.run(now); }
  Nanos next_deadline() const override { return device_.next_deadline(); }
  bool has_pending_work() const override { return device_.has_pending_work(); }

  transport::Device& device() const { return device_; }

 private:
  transport::Device& device_;
};

}  // namespace uroce::sim
