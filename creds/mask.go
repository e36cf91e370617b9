package creds

import (
	"strings"
	"unicode/utf8"
)

// tokenPrefixes are the documented, non-secret prefixes of common token
// formats, longest first so github_pat_ wins over shorter matches.
var tokenPrefixes = []string{
	"github_pat_", // GitHub fine-grained personal access token
	"glagent-",    // GitLab agent token
	"glsoat-",     // GitLab service account token
	"glcbt-",      // GitLab CI/CD job token
	"glimt-",      // GitLab incoming mail token
	"glpat-",      // GitLab personal/project/group access token
	"gloas-",      // GitLab OAuth application secret
	"glptt-",      // GitLab pipeline trigger token
	"gldt-",       // GitLab deploy token
	"glrt-",       // GitLab runner token
	"glft-",       // GitLab feed token
	"api_org_",    // Hugging Face organisation token (legacy)
	"ghp_",        // GitHub classic personal access token
	"gho_",        // GitHub OAuth token
	"ghu_",        // GitHub App user-to-server token
	"ghs_",        // GitHub App installation / Actions token
	"ghr_",        // GitHub refresh token
	"hf_",         // Hugging Face user access token
}

// TokenPrefix returns the token's well-known prefix (ghp_, github_pat_,
// glpat-, hf_, ...) or "".
func TokenPrefix(token string) string {
	for _, p := range tokenPrefixes {
		if strings.HasPrefix(token, p) && len(token) > len(p) {
			return p
		}
	}
	return ""
}

// RevealedChars returns how many trailing characters of a secret part of
// length n a masked form shows: none below 8, then a quarter, at most 4.
func RevealedChars(n int) int {
	if n < 8 {
		return 0
	}
	return min(4, n/4)
}

// MaskToken returns the masked form of a token without an index: its
// well-known prefix, "…", and the last [RevealedChars] characters of the rest,
// such as "ghp_…a1b2" or "…-1".
func MaskToken(token string) string {
	prefix := TokenPrefix(token)
	secret := token[len(prefix):]
	n := utf8.RuneCountInString(secret)
	keep := RevealedChars(n)
	tail := ""
	if keep > 0 {
		runes := []rune(secret)
		tail = string(runes[len(runes)-keep:])
	}
	return prefix + "…" + tail
}
