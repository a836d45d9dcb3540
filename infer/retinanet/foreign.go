package retinanet

import "strings"

// ForeignArchitecture names the DeepForest architecture other than
// RetinaNet whose state dict holds these tensor names (after Normalize,
// which strips one leading "model."), "" when none is recognised. It reads
// the module names of DeepForest's models (src/deepforest/models): torchvision's
// Faster R-CNN (FasterRCNN.py: fasterrcnn_resnet50_fpn, modules rpn and
// roi_heads) and Mask R-CNN (maskrcnn.py: roi_heads.mask_head), the
// Deformable DETR wrapper (DeformableDetr.py: net, a transformers
// DeformableDetrForObjectDetection with class_embed and bbox_embed) and the
// point model (keypoint.py: net, a DeformableDetrForKeypointDetection with
// point_embed); a saved transformers model has the same names without
// "net.".
func ForeignArchitecture(names []string) string {
	has := func(prefixes ...string) bool {
		for _, n := range names {
			n = strings.TrimPrefix(n, "net.")
			for _, p := range prefixes {
				if strings.HasPrefix(n, p) {
					return true
				}
			}
		}
		return false
	}
	switch {
	case has("point_embed."):
		return "DeepForest's point model (a Deformable DETR keypoint detector, DeformableDetrForKeypointDetection: point_embed, class_embed)"
	case has("bbox_embed.", "class_embed.", "model.backbone.conv_encoder.", "backbone.conv_encoder."):
		return "a Deformable DETR (DeepForest's DeformableDetr, transformers' DeformableDetrForObjectDetection: class_embed, bbox_embed)"
	case has("roi_heads.mask_head.", "roi_heads.mask_predictor."):
		return "a Mask R-CNN (torchvision's maskrcnn_resnet50_fpn: rpn, roi_heads with a mask head)"
	case has("rpn.", "roi_heads."):
		return "a Faster R-CNN (torchvision's fasterrcnn_resnet50_fpn, DeepForest's FasterRCNN: rpn, roi_heads)"
	}
	return ""
}
