#pragma once
// FlatHashIndex: a map from 64-bit hashes that are already well mixed (std::hash of a string,
// a splitmix64 output) to small values, in one power-of-two array probed linearly. Passes over
// every node of a cluster look up each node's precomputed hash in a few known ones (a pool's
// nodes and domains); std::unordered_map spends a division and a pointer chase per lookup there.
// The caller keeps what a hash stands for and confirms a match when collisions matter.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "toposched/common/hash.h"  // Mix64, which most callers hash with

namespace toposched {

template <class V>
class FlatHashIndex {
 public:
  // Adds `hash` -> `value`; false (and no change) when `hash` is already present.
  bool Insert(std::uint64_t hash, V value) {
    if ((size_ + 1) * 2 > slots_.size()) Grow();
    Slot* s = &slots_[Home(hash)];
    for (std::size_t i = Home(hash); s->used; i = (i + 1) & mask_, s = &slots_[i]) {
      if (s->hash == hash) return false;
    }
    *s = Slot{hash, std::move(value), true};
    ++size_;
    return true;
  }

  // The value for `hash`, or null.
  V* Find(std::uint64_t hash) { return const_cast<V*>(static_cast<const FlatHashIndex&>(*this).Find(hash)); }
  const V* Find(std::uint64_t hash) const {
    if (size_ == 0) return nullptr;
    for (std::size_t i = Home(hash);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (s.hash == hash) return &s.value;
    }
  }

  std::size_t size() const { return size_; }
  // Empties the index and keeps its array (a buffer reused call after call).
  void clear() {
    if (size_ == 0) return;
    for (Slot& s : slots_) s.used = false;
    size_ = 0;
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    V value{};
    bool used = false;
  };

  std::size_t Home(std::uint64_t hash) const { return static_cast<std::size_t>(hash ^ (hash >> 32)) & mask_; }

  void Grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.empty() ? 16 : old.size() * 2, Slot{});
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (Slot& s : old) {
      if (s.used) Insert(s.hash, std::move(s.value));
    }
  }

  std::vector<Slot> slots_;  // at most half full
  std::size_t size_ = 0;
  std::size_t mask_ = 0;
};

}  // namespace toposched
