// ECN Congestion Experienced marking, as a switch's egress queue does it to RoCEv2 traffic (what DCQCN's
// notification point reacts to).
//
// Only the two ECN bits change: of the IPv4 TOS byte, whose header checksum is updated to match, or of the
// IPv6 traffic class. The ICRC masks both fields (routers may rewrite them), so a marked RoCEv2 frame still
// passes the receiver's ICRC check.
#pragma once

#include <cstdint>
#include <span>

namespace uroce::sim {

// Sets CE on an ECN-capable frame: Ethernet (with at most one 802.1Q tag) + IPv4 or IPv6 whose ECN field
// is ECT(0) or ECT(1). True if it did. False, and the frame untouched, for anything else: Not-ECT (a
// switch would not mark it), already CE (nothing to do), a non-IP or truncated frame.
bool mark_ce(std::span<uint8_t> frame);

}  // namespace uroce::sim
