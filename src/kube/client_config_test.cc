// InClusterConfig against a temporary service-account folder and a fake environment;
// LoadKubeconfig against kubeconfig files written here.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "toposched/kube/transport.h"

namespace toposched::kube {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "toposched-config-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void WriteFile(const fs::path& path, const std::string& contents) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
}

std::string Base64(const std::string& data, bool padded = true) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  const int size =
      EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(data.data()), static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(size));
  if (!padded) {
    while (!out.empty() && out.back() == '=') out.pop_back();
  }
  return out;
}

std::function<const char*(const char*)> FakeEnv(std::map<std::string, std::string> values) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(values));
  return [shared](const char* name) -> const char* {
    const auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

// ---- in-cluster -------------------------------------------------------------------------

class InClusterConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_.path() / "token", "sa-token\n");
    WriteFile(dir_.path() / "ca.crt", "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n");
    WriteFile(dir_.path() / "namespace", "gpu-system\n");
  }
  std::string SaDir() const { return dir_.path().string(); }

  TempDir dir_;
};

TEST_F(InClusterConfigTest, ReadsTheServiceAccount) {
  auto config = InClusterConfig(
      FakeEnv({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}}), SaDir());
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->token_file, (dir_.path() / "token").string());
  EXPECT_EQ(config->token, "");  // re-read from the file by the transport
  EXPECT_EQ(config->ca_pem, "-----BEGIN CERTIFICATE-----\nca\n-----END CERTIFICATE-----\n");
  EXPECT_EQ(config->namespace_name, "gpu-system");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
}

TEST_F(InClusterConfigTest, BracketsAnIpv6Host) {
  auto config = InClusterConfig(
      FakeEnv({{"KUBERNETES_SERVICE_HOST", "fd00:10:96::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}}), SaDir());
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->server, "https://[fd00:10:96::1]:6443");
}

TEST_F(InClusterConfigTest, NamespaceDefaultsWhenTheFileIsAbsent) {
  fs::remove(dir_.path() / "namespace");
  auto config =
      InClusterConfig(FakeEnv({{"KUBERNETES_SERVICE_HOST", "h"}, {"KUBERNETES_SERVICE_PORT", "1"}}), SaDir());
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->namespace_name, "default");
}

TEST_F(InClusterConfigTest, ErrorsNameWhatIsMissing) {
  const auto env = FakeEnv({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}});
  struct Case {
    const char* name;
    std::function<const char*(const char*)> getenv;
    std::function<void(const fs::path&)> change;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"no host", FakeEnv({{"KUBERNETES_SERVICE_PORT", "443"}}), nullptr,
       "KUBERNETES_SERVICE_HOST is not set"},
      {"no port", FakeEnv({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}}), nullptr,
       "KUBERNETES_SERVICE_PORT is not set"},
      {"empty host", FakeEnv({{"KUBERNETES_SERVICE_HOST", ""}, {"KUBERNETES_SERVICE_PORT", "443"}}), nullptr,
       "KUBERNETES_SERVICE_HOST"},
      {"no token", env, [](const fs::path& d) { fs::remove(d / "token"); }, "token"},
      {"empty token", env, [](const fs::path& d) { WriteFile(d / "token", " \n"); }, "is empty"},
      {"no CA", env, [](const fs::path& d) { fs::remove(d / "ca.crt"); }, "ca.crt"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    WriteFile(dir.path() / "token", "t");
    WriteFile(dir.path() / "ca.crt", "ca");
    if (c.change) c.change(dir.path());
    auto config = InClusterConfig(c.getenv, dir.path().string());
    ASSERT_FALSE(config.ok());
    EXPECT_NE(config.error().message().find(c.error), std::string::npos) << config.error().message();
  }
}

// ---- kubeconfig -------------------------------------------------------------------------

class KubeconfigTest : public ::testing::Test {
 protected:
  // Writes `yaml` as <tmp>/kube/config and loads it.
  Result<ClientConfig> Load(const std::string& yaml, const std::string& context = "") {
    path_ = dir_.path() / "kube" / "config";
    WriteFile(path_, yaml);
    return LoadKubeconfig(path_.string(), context);
  }
  fs::path KubeDir() const { return dir_.path() / "kube"; }

  TempDir dir_;
  fs::path path_;
};

constexpr const char* kTwoContexts = R"(apiVersion: v1
kind: Config
current-context: alpha
clusters:
- name: alpha-cluster
  cluster:
    server: https://alpha.example:6443
    insecure-skip-tls-verify: true
- name: beta-cluster
  cluster:
    server: https://10.0.0.2:443
    tls-server-name: beta.internal
contexts:
- name: alpha
  context: {cluster: alpha-cluster, user: alpha-user, namespace: team-a}
- name: beta
  context: {cluster: beta-cluster, user: beta-user}
users:
- name: alpha-user
  user: {token: alpha-token}
- name: beta-user
  user: {token: beta-token}
)";

TEST_F(KubeconfigTest, CurrentContextWithATokenUser) {
  auto config = Load(kTwoContexts);
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->server, "https://alpha.example:6443");
  EXPECT_EQ(config->token, "alpha-token");
  EXPECT_TRUE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->namespace_name, "team-a");
  EXPECT_EQ(config->tls_server_name, "");
}

TEST_F(KubeconfigTest, AGivenContextOverridesTheCurrentOne) {
  auto config = Load(kTwoContexts, "beta");
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->server, "https://10.0.0.2:443");
  EXPECT_EQ(config->token, "beta-token");
  EXPECT_FALSE(config->insecure_skip_tls_verify);
  EXPECT_EQ(config->tls_server_name, "beta.internal");
  EXPECT_EQ(config->namespace_name, "default");
}

TEST_F(KubeconfigTest, InlineCertificateDataIsDecoded) {
  const std::string ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n";
  const std::string certificate = "-----BEGIN CERTIFICATE-----\nclient\n-----END CERTIFICATE-----\n";
  const std::string key = "-----BEGIN PRIVATE KEY-----\nkey!\n-----END PRIVATE KEY-----\n";
  auto config = Load(R"(current-context: c
clusters:
- name: k
  cluster:
    server: https://k:6443
    certificate-authority-data: )" +
                     Base64(ca) + R"(
    certificate-authority: does/not/matter.crt
contexts:
- name: c
  context: {cluster: k, user: u}
users:
- name: u
  user:
    client-certificate-data: )" +
                     Base64(certificate, /*padded=*/false) + R"(
    client-key-data: )" +
                     Base64(key) + "\n");
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->ca_pem, ca);  // -data wins over the file, as in client-go
  EXPECT_EQ(config->client_cert_pem, certificate);
  EXPECT_EQ(config->client_key_pem, key);
  EXPECT_EQ(config->token, "");
}

TEST_F(KubeconfigTest, RelativeFilesAreRelativeToTheKubeconfigsFolder) {
  WriteFile(KubeDir() / "pki" / "ca.crt", "CA PEM");
  WriteFile(KubeDir() / "pki" / "client.crt", "CLIENT PEM");
  WriteFile(KubeDir() / "pki" / "client.key", "KEY PEM");
  WriteFile(KubeDir() / "token", "file-token\n");
  auto config = Load(R"(current-context: c
clusters:
- name: k
  cluster: {server: "https://k:6443", certificate-authority: pki/ca.crt}
contexts:
- name: c
  context: {cluster: k, user: u, namespace: ns}
users:
- name: u
  user: {client-certificate: pki/client.crt, client-key: pki/client.key, tokenFile: token}
)");
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->ca_pem, "CA PEM");
  EXPECT_EQ(config->client_cert_pem, "CLIENT PEM");
  EXPECT_EQ(config->client_key_pem, "KEY PEM");
  EXPECT_EQ(config->token_file, (KubeDir() / "token").string());
}

TEST_F(KubeconfigTest, AContextWithoutAUserHasNoCredentials) {
  auto config = Load(R"(current-context: c
clusters: [{name: k, cluster: {server: "http://127.0.0.1:8080"}}]
contexts: [{name: c, context: {cluster: k}}]
)");
  ASSERT_TRUE(config.ok()) << config.error().message();
  EXPECT_EQ(config->server, "http://127.0.0.1:8080");
  EXPECT_TRUE(config->token.empty() && config->token_file.empty() && config->client_cert_pem.empty());
}

TEST_F(KubeconfigTest, ErrorsSayWhatIsWrong) {
  struct Case {
    const char* name;
    std::string yaml;
    std::string context;
    std::vector<std::string> error_parts;
  };
  const std::string cluster = "clusters: [{name: k, cluster: {server: \"https://k:6443\"}}]\n";
  const std::string context = "contexts: [{name: c, context: {cluster: k, user: u}}]\n";
  const std::vector<Case> cases = {
      {"exec plugin",
       "current-context: c\n" + cluster + context +
           "users: [{name: u, user: {exec: {command: aws, apiVersion: client.authentication.k8s.io/v1}}}]\n",
       "",
       {"user \"u\"", "exec credential plugin", "cannot run credential plugins",
        "service-account token or a client certificate"}},
      {"auth-provider plugin",
       "current-context: c\n" + cluster + context +
           "users: [{name: u, user: {auth-provider: {name: gcp}}}]\n",
       "",
       {"user \"u\"", "auth-provider", "cannot run credential plugins"}},
      {"basic auth",
       "current-context: c\n" + cluster + context + "users: [{name: u, user: {username: a, password: b}}]\n",
       "",
       {"basic authentication"}},
      {"no current context",
       cluster + context + "users: [{name: u, user: {token: t}}]\n",
       "",
       {"no current-context"}},
      {"unknown context",
       "current-context: c\n" + cluster + context + "users: [{name: u, user: {token: t}}]\n",
       "nope",
       {"context \"nope\" not found"}},
      {"missing cluster",
       "current-context: c\n" + context + "users: [{name: u, user: {token: t}}]\n",
       "",
       {"cluster \"k\"", "not in clusters"}},
      {"missing user", "current-context: c\n" + cluster + context, "", {"user \"u\"", "not in users"}},
      {"cluster without server",
       "current-context: c\nclusters: [{name: k, cluster: {}}]\n" + context +
           "users: [{name: u, user: {token: t}}]\n",
       "",
       {"cluster \"k\" has no server"}},
      {"bad base64",
       "current-context: c\nclusters: [{name: k, cluster: {server: s, certificate-authority-data: "
       "'a*b='}}]\n" +
           context + "users: [{name: u, user: {token: t}}]\n",
       "",
       {"certificate-authority-data", "invalid base64"}},
      {"CA file missing",
       "current-context: c\nclusters: [{name: k, cluster: {server: s, certificate-authority: nope.crt}}]\n" +
           context + "users: [{name: u, user: {token: t}}]\n",
       "",
       {"cluster \"k\"", "nope.crt"}},
      {"certificate without key",
       "current-context: c\n" + cluster + context +
           "users: [{name: u, user: {client-certificate-data: YQ==}}]\n",
       "",
       {"without a key"}},
      {"not YAML", "current-context: [unclosed\n", "", {"kubeconfig "}},
      {"not a map", "- just\n- a list\n", "", {"not a kubeconfig"}},
      {"insecure not a boolean",
       "current-context: c\nclusters: [{name: k, cluster: {server: s, insecure-skip-tls-verify: maybe}}]\n" +
           context + "users: [{name: u, user: {token: t}}]\n",
       "",
       {"insecure-skip-tls-verify is not a boolean"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto config = Load(c.yaml, c.context);
    ASSERT_FALSE(config.ok());
    EXPECT_EQ(config.error().message().rfind("kubeconfig " + path_.string(), 0), 0u)
        << config.error().message();
    for (const std::string& part : c.error_parts) {
      EXPECT_NE(config.error().message().find(part), std::string::npos) << config.error().message();
    }
  }
}

TEST_F(KubeconfigTest, MissingOrOversizedFilesAreErrors) {
  auto missing = LoadKubeconfig((dir_.path() / "absent").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().message(),
            "kubeconfig " + (dir_.path() / "absent").string() + ": cannot open: No such file or directory");

  auto big = Load("# " + std::string((4u << 20) + 10, 'x') + "\n");
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message().find(": larger than 4 MiB"), std::string::npos) << big.error().message();
}

TEST_F(KubeconfigTest, Base64EdgeCases) {
  struct Case {
    const char* name;
    std::string encoded;
    bool ok;
    std::string decoded;
  };
  const std::vector<Case> cases = {
      {"padded, 1 byte", "YQ==", true, "a"},
      {"padded, 2 bytes", "YWI=", true, "ab"},
      {"unpadded, 2 bytes", "YWI", true, "ab"},
      {"4 symbols", "YWJj", true, "abc"},
      {"with a line break and spaces", "YWJj\n  ZGVm", true, "abcdef"},
      {"one dangling symbol", "YWJjZ", false, ""},
      {"padding in the middle", "YQ==YQ==", false, ""},
      {"too much padding", "YQ===", false, ""},
      {"url-safe alphabet", "-_8=", false, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    // A double-quoted YAML scalar, so that "\n" inside it is a real line break.
    std::string quoted;
    for (const char ch : c.encoded) quoted += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    auto config = Load(
        "current-context: c\nclusters: [{name: k, cluster: {server: s}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
        "users:\n- name: u\n  user:\n    client-certificate-data: YQ==\n    client-key-data: \"" +
        quoted + "\"\n");
    ASSERT_EQ(config.ok(), c.ok) << (config.ok() ? "" : config.error().message());
    if (c.ok) {
      EXPECT_EQ(config->client_key_pem, c.decoded);
    }
  }
}

}  // namespace
}  // namespace toposched::kube
