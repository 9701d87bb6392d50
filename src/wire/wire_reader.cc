// The request readers: one simdjson On-Demand pass over the reader's own padded copy of the body.
// The fields we need are read where they stand; everything else is walked and checked (Skip), so
// a body that is not JSON is refused even where the bad part sits in a field we would have
// ignored (On-Demand alone only balances the brackets of what it skips), and nesting is bounded
// by kMaxNesting instead of by the stack.
//
// Field names, as upstream spells them (read in the search index, not copied):
// - kube-scheduler extender/v1 (kubernetes staging/src/k8s.io/kube-scheduler/extender/v1/types.go):
//   ExtenderArgs{Pod, Nodes, NodeNames}, ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node},
//   ExtenderPreemptionArgs{Pod, NodeNameToVictims, NodeNameToMetaVictims}, Victims{Pods,
//   NumPDBViolations}, MetaVictims{Pods, NumPDBViolations}, MetaPod{UID}. No json tags, so Go
//   writes the field names as they are; v1.Pod / v1.NodeList inside use the API's camelCase.
// - Volcano pkg/scheduler/plugins/extender/argument.go: tagged wrappers PredicateRequest{task,
//   node}, PrioritizeRequest{task, nodes}, PreemptableRequest{evictor, evictees} (reclaimable is
//   the same type), and the untagged OnSessionOpenRequest{Jobs, Nodes, Queues, ...}. The
//   scheduler objects inside carry no tags: TaskInfo (pkg/scheduler/api/job_info.go: UID, Job,
//   Name, Namespace, Resreq, the embedded TransactionContext's NodeName and Status, Pod),
//   Resource (resource_info.go: MilliCPU, Memory, ScalarResources, MaxTaskNum), NodeInfo
//   (node_info.go: Name, Node, ...).
//
// Views: a string without escapes is a view into the body copy; an escaped one is unescaped by
// simdjson into the parser's string buffer. Both live until the next iterate, i.e. the next Read*.//
// This file holds the per-object readers (v1.Pod, NodeList, Volcano's TaskInfo, Resource,
// NodeInfo, the victims maps) and the per-verb WireReader entry points; the field readers they
// are built from are in json_fields.h / json_fields.cc.

#include <simdjson.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json_fields.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {

// The shared field readers, by their short names throughout this file.
using namespace wire_internal;  // NOLINT(google-build-using-namespace)

namespace {

// Buffers grown past this by one large body (a Volcano session snapshot) are given back when a
// later body is much smaller, so a thread-local reader does not pin the peak forever.
constexpr std::size_t kKeepCapacity = std::size_t{4} << 20;

// v1.Pod: the identity from metadata, the raw text for ParsePodRequest. Null leaves `pod` empty.
Status ReadPod(const Ctx& c, od::value& v, const Path& p, int depth, PodRef* pod) {
  *pod = PodRef{};
  const char* start = v.raw_json_token().data();
  bool was_null = false;
  Status s = ForEachField(c, v, p, depth, &was_null, [&](std::string_view key, od::field& f, const Path& fp) {
    if (key != "metadata") return Skip(c, f.value(), fp, depth + 1);
    return ForEachField(c, f.value(), fp, depth + 1, nullptr,
                        [&](std::string_view mkey, od::field& mf, const Path& mp) {
                          if (mkey == "uid") return ReadString(c, mf.value(), mp, &pod->uid);
                          if (mkey == "namespace") return ReadString(c, mf.value(), mp, &pod->pod_namespace);
                          if (mkey == "name") return ReadString(c, mf.value(), mp, &pod->name);
                          if (mkey == "resourceVersion")
                            return ReadString(c, mf.value(), mp, &pod->resource_version);
                          return Skip(c, mf.value(), mp, depth + 2);
                        });
  });
  if (!s.ok() || was_null) return s;
  return RawSince(v, p, start, &pod->raw);
}

// ExtenderArgs.NodeNames: the hot path (thousands of names per filter call): one view per name,
// no allocation per name.
Status ReadNodeNames(const Ctx& c, od::value& v, const Path& p, int depth, std::size_t reserve_hint,
                     std::vector<NodeRef>* nodes, bool* given) {
  nodes->clear();
  *given = false;
  if (depth > kMaxNesting) return Fail(p, "nested deeper than " + std::to_string(kMaxNesting) + " levels");
  const std::string_view token = v.raw_json_token();
  if (!token.empty() && token.front() == 'n') return CheckLiteral(token, "null", p);
  if (token.empty() || token.front() != '[') return Expected(p, "an array", token);
  od::array array;
  if (auto e = v.get_array().get(array)) return Malformed(p, e);
  // Sized from the previous call's count: simdjson 3.0's count_elements costs a third of this
  // function, and consecutive filter calls carry similar candidate lists.
  nodes->reserve(std::max<std::size_t>(reserve_hint, 16));
  std::size_t index = 0;
  for (auto element_result : array) {
    od::value element;
    if (auto e = element_result.get(element)) return Malformed(p.Index(index), e);
    NodeRef& node = nodes->emplace_back();
    // A plain name is left unconsumed (the iteration steps over it); others take the slow path.
    if (!PlainString(c, element.raw_json_token(), &node.name)) {
      const std::string_view element_token = element.raw_json_token();
      if (element_token.empty() || element_token.front() != '"') {
        return Expected(p.Index(index), "a string", element_token);
      }
      TOPOSCHED_RETURN_IF_ERROR(ReadString(c, element, p.Index(index), &node.name));
    }
    ++index;
  }
  *given = true;
  return Status::Ok();
}

// ExtenderArgs.Nodes (a v1.NodeList): each item's metadata.name and raw text.
Status ReadNodeList(const Ctx& c, od::value& v, const Path& p, int depth, std::vector<NodeRef>* nodes,
                    bool* given) {
  nodes->clear();
  bool was_null = false;
  Status s = ForEachField(c, v, p, depth, &was_null, [&](std::string_view key, od::field& f, const Path& fp) {
    if (key != "items") return Skip(c, f.value(), fp, depth + 1);
    nodes->clear();
    return ForEachElement(
        f.value(), fp, depth + 1, nullptr, [&](od::value& item, const Path& ip, std::size_t) {
          const std::string_view item_token = item.raw_json_token();
          if (item_token.empty() || item_token.front() != '{') return Expected(ip, "an object", item_token);
          NodeRef node;
          Status is = ForEachField(
              c, item, ip, depth + 2, nullptr, [&](std::string_view ikey, od::field& itf, const Path& mp) {
                if (ikey != "metadata") return Skip(c, itf.value(), mp, depth + 3);
                return ForEachField(c, itf.value(), mp, depth + 3, nullptr,
                                    [&](std::string_view mkey, od::field& mf, const Path& np) {
                                      if (mkey == "name") return ReadString(c, mf.value(), np, &node.name);
                                      return Skip(c, mf.value(), np, depth + 4);
                                    });
              });
          if (!is.ok()) return is;
          if (node.name.empty()) return Missing(ip.Field("metadata").Field("name"));
          if (Status rs = RawSince(item, ip, item_token.data(), &node.raw); !rs.ok()) return rs;
          nodes->push_back(node);
          return Status::Ok();
        });
  });
  *given = s.ok() && !was_null;
  return s;
}

// Volcano api.Resource.
Status ReadResource(const Ctx& c, od::value& v, const Path& p, int depth, VolcanoResource* r) {
  *r = VolcanoResource{};
  return ForEachField(c, v, p, depth, nullptr, [&](std::string_view key, od::field& f, const Path& fp) {
    if (key == "MilliCPU") return ReadDouble(f.value(), fp, &r->milli_cpu);
    if (key == "Memory") return ReadDouble(f.value(), fp, &r->memory);
    if (key != "ScalarResources") return Skip(c, f.value(), fp, depth + 1);
    r->scalars.clear();
    return ForEachField(c, f.value(), fp, depth + 1, nullptr,
                        [&](std::string_view name, od::field& sf, const Path&) {
                          const Path sp = fp.MapKey(name);
                          ScalarResource scalar;
                          scalar.name = name;
                          if (name.find('\\') != std::string_view::npos) {
                            // Escaped resource name: unescape into the parser's buffer (never seen in
                            // practice).
                            if (auto e = sf.unescaped_key().get(scalar.name)) return Malformed(sp, e);
                          }
                          if (Status s = ReadDouble(sf.value(), sp, &scalar.value); !s.ok()) return s;
                          r->scalars.push_back(scalar);
                          return Status::Ok();
                        });
  });
}

// Volcano api.TaskInfo, with its raw text (echoed back as a victim). Null is "missing": every
// caller needs a task (an absent one is reported by the caller).
Status ReadTask(const Ctx& c, od::value& v, const Path& p, int depth, VolcanoTaskView* t) {
  *t = VolcanoTaskView{};
  const std::string_view token = v.raw_json_token();
  if (token.empty() || token.front() != '{') {
    if (!token.empty() && token.front() == 'n' && TrimRight(token) == "null") return Missing(p);
    return Expected(p, "an object", token);
  }
  Status s = ForEachField(c, v, p, depth, nullptr, [&](std::string_view key, od::field& f, const Path& fp) {
    if (key == "UID") return ReadString(c, f.value(), fp, &t->uid);
    if (key == "Name") return ReadString(c, f.value(), fp, &t->name);
    if (key == "Namespace") return ReadString(c, f.value(), fp, &t->task_namespace);
    if (key == "NodeName") return ReadString(c, f.value(), fp, &t->node_name);
    if (key == "Job") return ReadString(c, f.value(), fp, &t->job);
    if (key == "Status") {
      std::int64_t status = 0;
      if (Status rs = ReadInt64(f.value(), fp, &status); !rs.ok()) return rs;
      if (status < std::numeric_limits<int>::min() || status > std::numeric_limits<int>::max()) {
        return Fail(fp, "out of range");
      }
      t->status = static_cast<int>(status);
      return Status::Ok();
    }
    if (key == "Resreq") return ReadResource(c, f.value(), fp, depth + 1, &t->resreq);
    if (key == "Pod") return ReadPod(c, f.value(), fp, depth + 1, &t->pod);
    return Skip(c, f.value(), fp, depth + 1);
  });
  if (!s.ok()) return s;
  return RawSince(v, p, token.data(), &t->raw);
}

// Volcano api.NodeInfo: only Name, which must be non-empty.
Status ReadNodeInfoName(const Ctx& c, od::value& v, const Path& p, int depth, std::string_view* name) {
  *name = {};
  const std::string_view token = v.raw_json_token();
  if (!token.empty() && token.front() == 'n' && TrimRight(token) == "null") return Missing(p);
  Status s = ForEachField(c, v, p, depth, nullptr, [&](std::string_view key, od::field& f, const Path& fp) {
    if (key == "Name") return ReadString(c, f.value(), fp, name);
    return Skip(c, f.value(), fp, depth + 1);
  });
  if (!s.ok()) return s;
  if (name->empty()) return Missing(p.Field("Name"));
  return Status::Ok();
}

// ExtenderPreemptionArgs.NodeNameToVictims / NodeNameToMetaVictims: {node: {"Pods": [...],
// "NumPDBViolations": n}}. Victims' Pods are v1.Pods (uid in metadata); MetaVictims' are MetaPods
// ({"UID": ...}). Every victim needs a UID: the scheduler maps UIDs back to pods.
Status ReadVictimsMap(const Ctx& c, od::value& v, const Path& p, int depth, bool meta,
                      std::vector<NodeVictimsView>* out, bool* given) {
  out->clear();
  bool was_null = false;
  Status s =
      ForEachField(c, v, p, depth, &was_null, [&](std::string_view node_key, od::field& f, const Path&) {
        const Path np = p.MapKey(node_key);
        NodeVictimsView node;
        node.node = node_key;
        if (node_key.find('\\') != std::string_view::npos) {
          if (auto e = f.unescaped_key().get(node.node)) return Malformed(np, e);
        }
        if (node.node.empty()) return Fail(np, "empty node name");
        Status vs = ForEachField(
            c, f.value(), np, depth + 1, nullptr, [&](std::string_view key, od::field& vf, const Path& vp) {
              if (key == "NumPDBViolations") return ReadInt64(vf.value(), vp, &node.num_pdb_violations);
              if (key != "Pods") return Skip(c, vf.value(), vp, depth + 2);
              node.uids.clear();
              return ForEachElement(
                  vf.value(), vp, depth + 2, nullptr, [&](od::value& pod, const Path& pp, std::size_t) {
                    const std::string_view pod_token = pod.raw_json_token();
                    if (pod_token.empty() || pod_token.front() != '{')
                      return Expected(pp, "an object", pod_token);
                    std::string_view uid;
                    if (meta) {
                      Status ms = ForEachField(c, pod, pp, depth + 3, nullptr,
                                               [&](std::string_view mkey, od::field& mf, const Path& mp) {
                                                 if (mkey == "UID")
                                                   return ReadString(c, mf.value(), mp, &uid);
                                                 return Skip(c, mf.value(), mp, depth + 4);
                                               });
                      if (!ms.ok()) return ms;
                      if (uid.empty()) return Missing(pp.Field("UID"));
                    } else {
                      PodRef ref;
                      if (Status ps = ReadPod(c, pod, pp, depth + 3, &ref); !ps.ok()) return ps;
                      uid = ref.uid;
                      if (uid.empty()) return Missing(pp.Field("metadata").Field("uid"));
                    }
                    node.uids.push_back(uid);
                    return Status::Ok();
                  });
            });
        if (!vs.ok()) return vs;
        out->push_back(std::move(node));
        return Status::Ok();
      });
  *given = s.ok() && !was_null;
  return s;
}

}  // namespace

// ---- the reader ----

struct WireReader::Impl {
  std::unique_ptr<char[]> buffer;  // the body copy, then SIMDJSON_PADDING bytes
  std::size_t capacity = 0;        // the largest body `buffer` holds
  od::parser parser;
  od::document doc;
  std::size_t names_hint = 0;  // NodeNames count of the last ExtenderArgs, to size the next

  // Copies `body`, starts the iteration and opens the top-level object.
  Status Start(std::string_view body, const Path& root, od::object* top) {
    // A caller may hand back a view from the previous call (a raw Pod re-read as a body): then
    // the buffer must stay where it is, and the copy may overlap.
    const auto at = reinterpret_cast<std::uintptr_t>(body.data());
    const auto from = reinterpret_cast<std::uintptr_t>(buffer.get());
    const bool aliases = buffer != nullptr && at >= from && at < from + capacity;
    if (!aliases) {
      if (capacity > kKeepCapacity && body.size() < capacity / 4) {
        buffer.reset();
        capacity = 0;
      }
      if (body.size() > capacity || buffer == nullptr) {
        capacity = std::max(body.size(), capacity + capacity / 2);
        buffer = std::make_unique_for_overwrite<char[]>(capacity + simdjson::SIMDJSON_PADDING);
      }
    }
    if (parser.capacity() > kKeepCapacity && body.size() < parser.capacity() / 4) parser = od::parser{};
    if (!body.empty()) std::memmove(buffer.get(), body.data(), body.size());
    std::memset(buffer.get() + body.size(), 0, simdjson::SIMDJSON_PADDING);
    if (auto e = parser.iterate(buffer.get(), body.size(), capacity + simdjson::SIMDJSON_PADDING).get(doc)) {
      return Fail(root, "body is not JSON (" + std::string(simdjson::error_message(e)) + ")");
    }
    simdjson::ondemand::json_type type{};
    if (auto e = doc.type().get(type)) {
      return Fail(root, "body is not JSON (" + std::string(simdjson::error_message(e)) + ")");
    }
    if (type != simdjson::ondemand::json_type::object) {
      std::string_view token;
      if (doc.raw_json_token().get(token)) token = {};
      return Expected(root, "an object at the top level", token);
    }
    if (auto e = doc.get_object().get(*top)) {
      return Fail(root, "body is not JSON (" + std::string(simdjson::error_message(e)) + ")");
    }
    return Status::Ok();
  }

  // After the top-level object: nothing but whitespace may follow.
  Status Finish(const Path& root) {
    const char* location = nullptr;
    const simdjson::error_code e = doc.current_location().get(location);
    if (e == simdjson::OUT_OF_BOUNDS) return Status::Ok();  // at the end
    if (e) return Malformed(root, e);
    return Fail(root, "content after the top-level object");
  }

  // Runs `on_field` over the top-level fields of `body`, with the start/finish checks.
  template <typename OnField>
  Status ReadTop(std::string_view body, const Path& root, OnField&& on_field) {
    od::object top;
    TOPOSCHED_RETURN_IF_ERROR(Start(body, root, &top));
    const Ctx c(std::string_view(buffer.get(), body.size()));
    for (auto field_result : top) {
      od::field field;
      if (auto e = std::move(field_result).get(field)) return Malformed(root, e);
      std::string_view key;
      bool escaped = false;
      TOPOSCHED_RETURN_IF_ERROR(KeyOf(c, field, root, &key, &escaped));
      TOPOSCHED_RETURN_IF_ERROR(on_field(c, key, field, root.Field(key)));
    }
    return Finish(root);
  }
};

WireReader::WireReader() : impl_(std::make_unique<Impl>()) {}
WireReader::~WireReader() = default;

Result<ExtenderArgsView> WireReader::ReadExtenderArgs(std::string_view body) {
  const Path root("ExtenderArgs");
  ExtenderArgsView args;
  std::vector<NodeRef> from_nodes;  // Nodes.items, used when NodeNames is null
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key == "Pod") return ReadPod(c, f.value(), fp, 1, &args.pod);
        if (key == "NodeNames") {
          return ReadNodeNames(c, f.value(), fp, 1, impl_->names_hint, &args.nodes, &args.node_names_given);
        }
        if (key == "Nodes") return ReadNodeList(c, f.value(), fp, 1, &from_nodes, &args.nodes_given);
        return Skip(c, f.value(), fp, 1);
      }));
  if (args.pod.raw.empty()) return Missing(root.Field("Pod")).error();
  if (args.node_names_given) {
    impl_->names_hint = args.nodes.size();
  } else {
    args.nodes = std::move(from_nodes);
  }
  return args;
}

Result<BindingArgs> WireReader::ReadBindingArgs(std::string_view body) {
  const Path root("ExtenderBindingArgs");
  BindingArgs args;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key == "PodName") return ReadString(c, f.value(), fp, &args.pod_name);
        if (key == "PodNamespace") return ReadString(c, f.value(), fp, &args.pod_namespace);
        if (key == "PodUID") return ReadString(c, f.value(), fp, &args.pod_uid);
        if (key == "Node") return ReadString(c, f.value(), fp, &args.node);
        return Skip(c, f.value(), fp, 1);
      }));
  // All four are needed to create the v1.Binding (and to find the pod's cached placement).
  if (args.pod_name.empty()) return Missing(root.Field("PodName")).error();
  if (args.pod_namespace.empty()) return Missing(root.Field("PodNamespace")).error();
  if (args.pod_uid.empty()) return Missing(root.Field("PodUID")).error();
  if (args.node.empty()) return Missing(root.Field("Node")).error();
  return args;
}

Result<PreemptionArgsView> WireReader::ReadPreemptionArgs(std::string_view body) {
  const Path root("ExtenderPreemptionArgs");
  PreemptionArgsView args;
  std::vector<NodeVictimsView> full, meta;
  bool full_given = false, meta_given = false;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key == "Pod") return ReadPod(c, f.value(), fp, 1, &args.pod);
        if (key == "NodeNameToVictims") return ReadVictimsMap(c, f.value(), fp, 1, false, &full, &full_given);
        if (key == "NodeNameToMetaVictims")
          return ReadVictimsMap(c, f.value(), fp, 1, true, &meta, &meta_given);
        return Skip(c, f.value(), fp, 1);
      }));
  if (args.pod.raw.empty()) return Missing(root.Field("Pod")).error();
  args.nodes = meta_given ? std::move(meta) : std::move(full);
  return args;
}

Result<VolcanoPredicateArgs> WireReader::ReadVolcanoPredicate(std::string_view body) {
  const Path root("predicate");
  VolcanoPredicateArgs args;
  bool task_seen = false, node_seen = false;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key == "task") {
          task_seen = true;
          return ReadTask(c, f.value(), fp, 1, &args.task);
        }
        if (key == "node") {
          node_seen = true;
          return ReadNodeInfoName(c, f.value(), fp, 1, &args.node_name);
        }
        return Skip(c, f.value(), fp, 1);
      }));
  if (!task_seen) return Missing(root.Field("task")).error();
  if (!node_seen) return Missing(root.Field("node")).error();
  return args;
}

Result<VolcanoPrioritizeArgs> WireReader::ReadVolcanoPrioritize(std::string_view body) {
  const Path root("prioritize");
  VolcanoPrioritizeArgs args;
  bool task_seen = false;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key == "task") {
          task_seen = true;
          return ReadTask(c, f.value(), fp, 1, &args.task);
        }
        if (key != "nodes") return Skip(c, f.value(), fp, 1);
        args.node_names.clear();
        return ForEachElement(f.value(), fp, 1, nullptr, [&](od::value& node, const Path& np, std::size_t) {
          std::string_view name;
          if (Status ns = ReadNodeInfoName(c, node, np, 2, &name); !ns.ok()) return ns;
          args.node_names.push_back(name);
          return Status::Ok();
        });
      }));
  if (!task_seen) return Missing(root.Field("task")).error();
  return args;
}

Result<VolcanoEventArgs> WireReader::ReadVolcanoEvent(std::string_view body) {
  const Path root("event");
  VolcanoEventArgs args;
  bool task_seen = false;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key != "task") return Skip(c, f.value(), fp, 1);
        task_seen = true;
        return ReadTask(c, f.value(), fp, 1, &args.task);
      }));
  if (!task_seen) return Missing(root.Field("task")).error();
  return args;
}

Result<VolcanoEvictArgs> WireReader::ReadVolcanoEvict(std::string_view body) {
  const Path root("evict");
  VolcanoEvictArgs args;
  bool evictor_seen = false;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        if (key == "evictor") {
          evictor_seen = true;
          return ReadTask(c, f.value(), fp, 1, &args.evictor);
        }
        if (key != "evictees") return Skip(c, f.value(), fp, 1);
        args.evictees.clear();
        return ForEachElement(f.value(), fp, 1, nullptr, [&](od::value& task, const Path& tp, std::size_t) {
          VolcanoTaskView view;
          const std::string_view token = task.raw_json_token();
          if (token.empty() || token.front() != '{') return Expected(tp, "an object", token);
          if (Status ts = ReadTask(c, task, tp, 2, &view); !ts.ok()) return ts;
          args.evictees.push_back(std::move(view));
          return Status::Ok();
        });
      }));
  if (!evictor_seen) return Missing(root.Field("evictor")).error();
  return args;
}

Result<VolcanoSessionArgs> WireReader::ReadVolcanoSession(std::string_view body) {
  const Path root("onSessionOpen");
  VolcanoSessionArgs args;
  TOPOSCHED_RETURN_IF_ERROR(
      impl_->ReadTop(body, root, [&](const Ctx& c, std::string_view key, od::field& f, const Path& fp) {
        std::size_t* count = key == "Jobs"     ? &args.jobs
                             : key == "Nodes"  ? &args.nodes
                             : key == "Queues" ? &args.queues
                                               : nullptr;
        if (count == nullptr) return Skip(c, f.value(), fp, 1);
        *count = 0;
        return ForEachField(c, f.value(), fp, 1, nullptr,
                            [&](std::string_view entry, od::field& ef, const Path&) {
                              ++*count;
                              return Skip(c, ef.value(), fp.MapKey(entry), 2);
                            });
      }));
  return args;
}

}  // namespace toposched::extender
