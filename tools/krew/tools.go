//go:build tools

// Keeps krew, which .ci/build-cluster builds, in this module's requirements for go mod tidy.
package tools

import _ "sigs.k8s.io/krew/cmd/krew"
