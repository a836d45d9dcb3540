package retinanet

import (
	"strings"
	"testing"
)

// TestForeignArchitecture: the state dicts of DeepForest's other
// architectures (module names from its models/ sources) are named; a
// RetinaNet's, and an unknown one's, are not.
func TestForeignArchitecture(t *testing.T) {
	body := []string{"backbone.body.conv1.weight", "backbone.fpn.inner_blocks.0.0.weight"}
	for _, c := range []struct {
		keys []string
		want string
	}{
		{append(body, "rpn.head.conv.0.0.weight", "roi_heads.box_head.fc6.weight", "roi_heads.box_predictor.cls_score.weight"), "Faster R-CNN"},
		{append(body, "roi_heads.box_predictor.bbox_pred.weight"), "Faster R-CNN"},
		{append(body, "rpn.head.cls_logits.weight"), "Faster R-CNN"},
		{append(body, "rpn.head.conv.0.0.weight", "roi_heads.mask_head.mask_fcn1.0.weight"), "Mask R-CNN"},
		{[]string{"net.model.backbone.conv_encoder.model.conv1.weight", "net.class_embed.0.weight", "net.bbox_embed.0.layers.0.weight"}, "Deformable DETR"},
		{[]string{"backbone.conv_encoder.model.conv1.weight", "class_embed.0.bias"}, "Deformable DETR"},
		{[]string{"model.backbone.conv_encoder.model.conv1.weight"}, "Deformable DETR"},
		{[]string{"net.model.backbone.conv_encoder.model.conv1.weight", "net.class_embed.0.weight", "net.point_embed.0.layers.0.weight"}, "point model"},
		{[]string{"point_embed.0.layers.2.bias"}, "point model"},
		{append(body, "head.classification_head.cls_logits.weight", "head.regression_head.bbox_reg.weight"), ""},
		{[]string{"fc.weight", "layer1.0.conv1.weight"}, ""},
		{nil, ""},
	} {
		got := ForeignArchitecture(c.keys)
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%v: %q, want %q", c.keys, got, c.want)
		}
	}
}
