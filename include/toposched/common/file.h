#pragma once
// Reading a whole file that a person or a pod supplied (a config, a topology, a token), with a
// size bound: one copy, so every command refuses the same things with the same words.

#include <cstddef>
#include <string>

#include "toposched/common/status.h"

namespace toposched {

// The whole content of the regular file at `path`, at most `max_bytes` long.
//  - Only regular files (symlinks to one included): a FIFO, a device or a socket is refused
//    without waiting (the open is non-blocking), so a bad path cannot hang a command.
//  - Never reads more than max_bytes + 1 bytes, whatever the file's size says or becomes while
//    it is read (a file that grows is still refused; one that shrinks gives what is there).
// Errors do not name the path (callers add it, usually with Error::WithContext(path)):
//   "cannot open: <strerror>", "is a directory", "not a regular file",
//   "larger than <max_bytes>", "cannot stat: <strerror>", "cannot read: <strerror>".
// The limit is written exactly, in the largest unit that divides it: "larger than 1 MiB",
// "larger than 64 KiB", "larger than 1500 bytes".
Result<std::string> ReadFileBounded(const std::string& path, std::size_t max_bytes);

}  // namespace toposched
