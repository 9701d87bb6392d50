// Where the API server's address and credentials come from: the pod's service account
// (InClusterConfig) or a kubeconfig file (LoadKubeconfig). Both read every file they need up
// front, with a size bound, so a bad configuration fails at startup with a clear error.

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <tuple>

#include "toposched/common/file.h"
#include "toposched/common/text.h"
#include "toposched/kube/transport.h"

namespace toposched::kube {

namespace {

constexpr std::size_t kMaxKubeconfigBytes = 4u << 20;
constexpr std::size_t kMaxPemBytes = 1u << 20;     // a CA bundle or a client certificate chain
constexpr std::size_t kMaxTokenBytes = 64u << 10;  // projected tokens are ~1 KiB
constexpr std::size_t kMaxNamespaceBytes = 4u << 10;

// The whole file, or an error that starts with `what` and the path ("kubeconfig /x: cannot open:
// No such file or directory").
Result<std::string> ReadNamedFile(const std::filesystem::path& path, std::size_t max_bytes,
                                  const std::string& what) {
  auto contents = ReadFileBounded(path.string(), max_bytes);
  if (!contents.ok()) return contents.error().WithContext(what + " " + path.string());
  return contents;
}

// RFC 4648 base64 (standard alphabet). Whitespace is ignored (kubeconfigs wrap long values);
// padding is optional but, when present, must be at the end.
Result<std::string> DecodeBase64(std::string_view text) {
  static constexpr std::array<std::int8_t, 256> kValues = [] {
    std::array<std::int8_t, 256> values{};
    values.fill(-1);
    constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (std::size_t i = 0; i < kAlphabet.size(); ++i) {
      values[static_cast<unsigned char>(kAlphabet[i])] = static_cast<std::int8_t>(i);
    }
    return values;
  }();
  std::string out;
  out.reserve(text.size() / 4 * 3 + 3);
  std::uint32_t bits = 0;
  int bit_count = 0;
  std::size_t symbols = 0, padding = 0;
  for (const char c : text) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') continue;
    if (c == '=') {
      ++padding;
      continue;
    }
    const std::int8_t value = kValues[static_cast<unsigned char>(c)];
    if (value < 0 || padding > 0) return Error("invalid base64");
    ++symbols;
    bits = (bits << 6) | static_cast<std::uint8_t>(value);
    bit_count += 6;
    if (bit_count >= 8) {
      bit_count -= 8;
      out.push_back(static_cast<char>((bits >> bit_count) & 0xff));
    }
  }
  // A final group of 1 symbol cannot encode a byte; padding may only complete the last group.
  if (symbols % 4 == 1 || padding > 2 || (padding > 0 && (symbols + padding) % 4 != 0)) {
    return Error("invalid base64");
  }
  return out;
}

// A scalar field of a kubeconfig map, or nullopt when absent or null.
Result<std::optional<std::string>> StringField(const YAML::Node& map, const char* key) {
  const YAML::Node node = map[key];
  if (!node || node.IsNull()) return std::optional<std::string>();
  if (!node.IsScalar()) return Error(std::string("\"") + key + "\" is not a string");
  return std::optional<std::string>(node.Scalar());
}

// The `field` map of the entry named `name` in the list `list` ("clusters", "users",
// "contexts"): entries look like {name: NAME, cluster: {...}}. Null when absent.
Result<YAML::Node> NamedEntry(const YAML::Node& root, const char* list, const char* field,
                              const std::string& name) {
  const YAML::Node entries = root[list];
  if (!entries || entries.IsNull()) return YAML::Node(YAML::NodeType::Undefined);
  if (!entries.IsSequence()) return Error(std::string("\"") + list + "\" is not a list");
  for (const YAML::Node& entry : entries) {
    if (!entry.IsMap()) continue;
    const YAML::Node entry_name = entry["name"];
    if (!entry_name || !entry_name.IsScalar() || entry_name.Scalar() != name) continue;
    const YAML::Node value = entry[field];
    if (!value || value.IsNull()) return YAML::Node(YAML::NodeType::Map);  // named but empty
    if (!value.IsMap()) return Error(std::string(list) + " \"" + name + "\": \"" + field + "\" is not a map");
    return value;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

// PEM data from `<key>-data` (base64, preferred, as client-go does) or the file `<key>`
// (relative to the kubeconfig's folder). Empty when neither is set.
Result<std::string> PemField(const YAML::Node& map, const std::string& key, const std::filesystem::path& base,
                             const std::string& owner) {
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto data, StringField(map, (key + "-data").c_str()), owner);
  if (data.has_value() && !data->empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto decoded, DecodeBase64(*data), owner + ": " + key + "-data");
    return decoded;
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto file, StringField(map, key.c_str()), owner);
  if (!file.has_value() || file->empty()) return std::string();
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto contents, ReadNamedFile(base / *file, kMaxPemBytes, key), owner);
  return contents;
}

Result<ClientConfig> ParseKubeconfig(const YAML::Node& root, const std::filesystem::path& base,
                                     const std::string& requested_context) {
  if (!root.IsMap()) return Error("not a kubeconfig (the document is not a map)");
  std::string context_name = requested_context;
  if (context_name.empty()) {
    TOPOSCHED_ASSIGN_OR_RETURN(auto current, StringField(root, "current-context"));
    if (!current.has_value() || current->empty()) {
      return Error("no current-context is set and no context was given");
    }
    context_name = *current;
  }

  TOPOSCHED_ASSIGN_OR_RETURN(auto context, NamedEntry(root, "contexts", "context", context_name));
  if (!context.IsDefined()) return Error("context \"" + context_name + "\" not found");
  const std::string context_owner = "context \"" + context_name + "\"";
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto cluster_name, StringField(context, "cluster"), context_owner);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto user_name, StringField(context, "user"), context_owner);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto namespace_name, StringField(context, "namespace"), context_owner);
  if (!cluster_name.has_value() || cluster_name->empty()) return Error(context_owner + " names no cluster");

  ClientConfig config;
  if (namespace_name.has_value() && !namespace_name->empty()) config.namespace_name = *namespace_name;

  // The cluster.
  const std::string cluster_owner = "cluster \"" + *cluster_name + "\"";
  TOPOSCHED_ASSIGN_OR_RETURN(auto cluster, NamedEntry(root, "clusters", "cluster", *cluster_name));
  if (!cluster.IsDefined())
    return Error(context_owner + " names " + cluster_owner + ", which is not in clusters");
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto server, StringField(cluster, "server"), cluster_owner);
  if (!server.has_value() || server->empty()) return Error(cluster_owner + " has no server");
  config.server = *server;
  TOPOSCHED_ASSIGN_OR_RETURN(auto ca, PemField(cluster, "certificate-authority", base, cluster_owner));
  config.ca_pem = std::move(ca);
  if (const YAML::Node insecure = cluster["insecure-skip-tls-verify"]; insecure && !insecure.IsNull()) {
    bool value = false;
    if (!insecure.IsScalar() || !YAML::convert<bool>::decode(insecure, value)) {
      return Error(cluster_owner + ": insecure-skip-tls-verify is not a boolean");
    }
    config.insecure_skip_tls_verify = value;
  }
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto server_name, StringField(cluster, "tls-server-name"), cluster_owner);
  if (server_name.has_value()) config.tls_server_name = *server_name;

  // The user (a context without one talks to the server without credentials).
  if (!user_name.has_value() || user_name->empty()) return config;
  const std::string user_owner = "user \"" + *user_name + "\"";
  TOPOSCHED_ASSIGN_OR_RETURN(auto user, NamedEntry(root, "users", "user", *user_name));
  if (!user.IsDefined()) return Error(context_owner + " names " + user_owner + ", which is not in users");
  const auto plugin = [&](const char* kind) {
    return Error(user_owner + " authenticates with " + kind +
                 "; toposched cannot run credential plugins (use a service-account token or a client "
                 "certificate)");
  };
  if (user["exec"] && !user["exec"].IsNull()) return plugin("an exec credential plugin");
  if (user["auth-provider"] && !user["auth-provider"].IsNull()) return plugin("an auth-provider plugin");
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto token, StringField(user, "token"), user_owner);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto token_file, StringField(user, "tokenFile"), user_owner);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto username, StringField(user, "username"), user_owner);
  if (token.has_value()) config.token = std::string(TrimSpace(*token));
  if (token_file.has_value() && !token_file->empty()) {
    const std::filesystem::path path = base / *token_file;
    // Read now to fail now, not at the first call.
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::ignore, ReadNamedFile(path, kMaxTokenBytes, "token file"),
                                   user_owner);
    config.token_file = path.string();
  }
  TOPOSCHED_ASSIGN_OR_RETURN(auto certificate, PemField(user, "client-certificate", base, user_owner));
  TOPOSCHED_ASSIGN_OR_RETURN(auto key, PemField(user, "client-key", base, user_owner));
  if (certificate.empty() != key.empty()) {
    return Error(user_owner + " has a client certificate without a key, or a key without a certificate");
  }
  config.client_cert_pem = std::move(certificate);
  config.client_key_pem = std::move(key);
  if (config.token.empty() && config.token_file.empty() && config.client_cert_pem.empty() &&
      username.has_value()) {
    return Error(user_owner +
                 " uses basic authentication (username/password), which toposched does not support");
  }
  return config;
}

}  // namespace

Result<ClientConfig> InClusterConfig(const std::function<const char*(const char*)>& getenv,
                                     const std::string& sa_dir) {
  const auto env = [&](const char* name) -> std::string {
    const char* value = getenv ? getenv(name) : std::getenv(name);
    return value == nullptr ? std::string() : std::string(TrimSpace(value));
  };
  const std::string host = env("KUBERNETES_SERVICE_HOST");
  const std::string port = env("KUBERNETES_SERVICE_PORT");
  if (host.empty() || port.empty()) {
    return Error(std::string("not running in a cluster: ") +
                 (host.empty() ? "KUBERNETES_SERVICE_HOST" : "KUBERNETES_SERVICE_PORT") + " is not set");
  }
  ClientConfig config;
  const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
  config.server = "https://" + (ipv6 ? "[" + host + "]" : host) + ":" + port;

  const std::filesystem::path dir(sa_dir);
  const std::filesystem::path token_file = dir / "token";
  TOPOSCHED_ASSIGN_OR_RETURN(auto token, ReadNamedFile(token_file, kMaxTokenBytes, "service-account token"));
  if (TrimSpace(token).empty()) return Error("service-account token " + token_file.string() + " is empty");
  config.token_file = token_file.string();

  TOPOSCHED_ASSIGN_OR_RETURN(auto ca,
                             ReadNamedFile(dir / "ca.crt", kMaxPemBytes, "service-account CA bundle"));
  config.ca_pem = std::move(ca);

  const std::filesystem::path namespace_file = dir / "namespace";
  std::error_code ec;
  if (std::filesystem::exists(namespace_file, ec)) {
    TOPOSCHED_ASSIGN_OR_RETURN(
        auto namespace_name, ReadNamedFile(namespace_file, kMaxNamespaceBytes, "service-account namespace"));
    if (!TrimSpace(namespace_name).empty()) config.namespace_name = std::string(TrimSpace(namespace_name));
  }
  return config;
}

Result<ClientConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  TOPOSCHED_ASSIGN_OR_RETURN(auto contents, ReadNamedFile(path, kMaxKubeconfigBytes, "kubeconfig"));
  const std::filesystem::path base = std::filesystem::path(path).parent_path();
  try {
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(auto config, ParseKubeconfig(YAML::Load(contents), base, context),
                                   "kubeconfig " + path);
    return config;
  } catch (const YAML::Exception& e) {
    return Error("kubeconfig " + path + ": " + e.what());
  }
}

}  // namespace toposched::kube
